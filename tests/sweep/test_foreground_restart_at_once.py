"""A foreground sequential sweep whose coordinator is SIGKILLed while a member is starting, and
again while one is stopping, each time started again at once (without waiting for the members),
finishes with the verdict and looks of its uninterrupted twin (slow: real daemons on the
session's tiny trunk, tests/sweep_world.py's sequential plan, one member at a time).

Each moment is reached by events, never by sleeping: a daemon's SIGTERM handler is in (its
/proc status: from then on the coordinator's death asks it to save and stop instead of killing
it), its socket answers, its resume state is saved mid-run; a daemon is held at such
a point with SIGSTOP and let go with SIGCONT. The test process is its descendants' subreaper
meanwhile: a daemon whose coordinator it killed is adopted here, not by init, so its process group
(its own, sweep/run/backends.py) is not orphaned while stopped, which the kernel would answer with
SIGHUP (the daemon's death) and SIGCONT.

- starting: the first member's daemon (a) has not bound its socket when its coordinator dies.
  The restarted coordinator finds nothing that runs and starts the member again (b); a binds its
  socket first, then b meets it. b exits 75, the run is already running, and the coordinator
  waits for a, then starts the member again. (Before, b exited 78, a configuration error: the
  member was "fatal" and the sweep stopped.)
- stopping: the second member's daemon has saved mid-run when its coordinator dies; it holds the
  SIGTERM (saving, exiting) while the next coordinator starts and finds it running.
"""
from __future__ import annotations

import ctypes
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from sweep_world import sequential_plan_world, start_foreground

from tatu.daemon.control.client import answers
from tatu.daemon.control.server import socket_path
from tatu.sweep.judge import looks_log

pytestmark = pytest.mark.slow

PR_SET_CHILD_SUBREAPER = 36
VERDICT = "verdict: config=first (first config such that drift_hi < 50%); sequential obf"


class Coordinator:
    """`tatu sweep start --foreground -K 1`, its output collected as it comes."""

    def __init__(self, plan: Path, sweeps: Path):
        self.proc = start_foreground(plan, sweeps, "-K", "1", wait=False)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._reader.start()

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def finish(self) -> str:
        self.proc.wait(timeout=600)
        self._reader.join(timeout=30)
        return self.out


def wait_for(what: str, predicate, coordinator: Coordinator, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if coordinator.proc.poll() is not None:
            coordinator.finish()
            pytest.fail(f"the coordinator ended ({coordinator.proc.returncode}) before {what}:\n{coordinator.out}")
        assert time.monotonic() < deadline, f"no {what} after {timeout}s:\n{coordinator.out}"
        time.sleep(0.005)


def daemon_of(coordinator: Coordinator, run: str) -> psutil.Process | None:
    """The coordinator's child running member `run` (its command line names the member's env file)."""
    for child in psutil.Process(coordinator.proc.pid).children():
        try:
            if any(arg.endswith(f"/{run}.env") for arg in child.cmdline()):
                return child
        except psutil.NoSuchProcess:
            pass  # a child that exited while listed is not the member's daemon: look at the next one
    return None


def catches_sigterm(process: psutil.Process) -> bool:
    """Its SIGTERM handler is in (daemon/signals.install, the daemon's first act): the caught-signal
    mask in /proc."""
    try:
        status = Path(f"/proc/{process.pid}/status").read_text()
    except FileNotFoundError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def started_daemon(coordinator: Coordinator, run: str) -> psutil.Process:
    """The member's daemon, held (SIGSTOP) once its SIGTERM handler is in."""
    process = wait_for(f"a daemon for {run}", lambda: daemon_of(coordinator, run), coordinator)
    wait_for(f"{run}'s SIGTERM handler", lambda: catches_sigterm(process), coordinator)
    process.suspend()
    return process


@contextmanager
def adopting_orphans():
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def saved_mid_run(run_dir: Path) -> bool:
    events = run_dir / "events.jsonl"
    return events.exists() and '"reason": "scheduled"' in events.read_text() and not (run_dir / "verdict.json").exists()


@pytest.fixture(scope="module")
def worlds(tmp_path_factory, tiny_trunk):
    return {name: sequential_plan_world(tmp_path_factory, tiny_trunk, "seqnow") for name in ("twin", "killed")}


@pytest.fixture(scope="module")
def twin(worlds) -> Path:
    root, plan = worlds["twin"]
    coordinator = Coordinator(plan, root / "sweeps")
    out = coordinator.finish()
    assert coordinator.proc.returncode == 0 and VERDICT in out, out
    return root / "sweeps" / "seqnow"


FIRST, SECOND = "seqnow.first-s1", "seqnow.first-s2"


class KilledSweep:
    """The killed sweep's coordinators and the daemons the test held, for the cleanup."""

    def __init__(self, plan: Path, sweeps: Path):
        self.plan, self.sweeps, self.sweep_dir = plan, sweeps, sweeps / "seqnow"
        self.coordinators: list[Coordinator] = []
        self.daemons: list[psutil.Process] = []

    def coordinator(self) -> Coordinator:
        self.coordinators.append(Coordinator(self.plan, self.sweeps))
        return self.coordinators[-1]

    def held(self, process: psutil.Process) -> psutil.Process:
        self.daemons.append(process)
        return process

    def run(self) -> None:
        """Three coordinators, the first two killed at the two moments; the last one runs to its end."""
        first_dir, second_dir = self.sweep_dir / "runs" / FIRST, self.sweep_dir / "runs" / SECOND
        # starting: a has neither its socket nor its run dir when its coordinator dies
        c1 = self.coordinator()
        a = self.held(started_daemon(c1, FIRST))
        assert not socket_path(FIRST).exists() and not first_dir.exists()
        c1.kill()  # a gets SIGTERM (PR_SET_PDEATHSIG), held until it goes on

        c2 = self.coordinator()  # at once: nothing says a runs yet, so the member is started again
        b = self.held(started_daemon(c2, FIRST))
        a.resume()
        wait_for(f"{FIRST}'s socket", lambda: answers(socket_path(FIRST)), c2)
        a.suspend()  # bound, its run dir not created yet: b meets the socket, not the run dir's lock
        assert not first_dir.exists()
        b.resume()
        b.wait(timeout=300)
        log = (self.sweep_dir / "logs" / "first-s1.out").read_text()
        assert f"TATU_RUN={FIRST}: another daemon is already listening at {socket_path(FIRST)}" in log, log
        a.resume()  # it stops before its baseline (its SIGTERM); the coordinator then starts the member

        # stopping: the second member's daemon has saved mid-run and holds its coordinator's SIGTERM
        wait_for(f"{SECOND} saved mid-run", lambda: saved_mid_run(second_dir), c2)
        stopping = daemon_of(c2, SECOND)
        assert stopping is not None, f"{SECOND} ended before it could be held mid-run"
        self.held(stopping).suspend()
        assert not (second_dir / "verdict.json").exists()
        c2.kill()
        c3 = self.coordinator()
        wait_for("the coordinator's first line", lambda: "coordinator up" in c3.out, c3)
        stopping.resume()
        c3.finish()

    def clean_up(self) -> None:
        """A test that failed leaves no daemon stopped for good; the adopted ones are reaped."""
        for process in self.daemons:
            try:
                process.resume()
                if process.status() != psutil.STATUS_ZOMBIE:
                    process.kill()
                process.wait(timeout=60)
            except psutil.Error:
                pass  # clean-up only: a held daemon that already ended needs nothing more
        for c in self.coordinators:
            if c.proc.poll() is None:
                c.kill()


def test_killed_while_a_member_starts_and_while_one_stops_then_started_at_once(worlds, twin):
    root, plan = worlds["killed"]
    sweep = KilledSweep(plan, root / "sweeps")
    with adopting_orphans():
        try:
            sweep.run()
        finally:
            sweep.clean_up()
    c2, c3 = sweep.coordinators[1:]
    assert c3.proc.returncode == 0, c2.out + c3.out
    assert "fatal" not in c2.out + c3.out
    assert VERDICT in c3.out, c3.out
    looks = [(l.config, l.look.n_seeds, l.look.decision, l.members) for l in looks_log.read(sweep.sweep_dir)]
    assert looks == [(l.config, l.look.n_seeds, l.look.decision, l.members) for l in looks_log.read(twin)]
    assert sorted(p.name for p in (sweep.sweep_dir / "runs").iterdir()) == sorted(p.name for p in (twin / "runs").iterdir())
    events = (sweep.sweep_dir / "runs" / SECOND / "events.jsonl").read_text()
    assert '"resumed"' in events  # the second member was interrupted mid-run, and resumed

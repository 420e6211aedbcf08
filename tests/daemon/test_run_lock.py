"""One daemon per run dir (daemon/run/lock.py): a second daemon exits 75 naming the dir and the
holder's pid and writes nothing; so does one that finds the run's control socket held (a fresh run
still loading has a socket and no dir yet), the same code whichever of the two it meets first; the
lock dies with its process (kill -9); a fresh start that finds a resume state appeared meanwhile
does not start over it; the foreground sweep backend sees a member whose daemon holds its run dir
as running. Real processes, real flocks."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_world import clean_environ, daemon, sft_env

from tatu import exitcodes
from tatu.daemon.run.lock import RunDirBusy, RunDirLock, holder_pid
from tatu.sweep.run.backends import ForegroundBackend
from tatu.sweep.plan.member import Member

HOLD = """
import sys, time
from tatu.daemon.run.lock import RunDirLock
RunDirLock(sys.argv[1]).take_existing()
print("locked", flush=True)
time.sleep(600)
"""


@pytest.fixture
def held(tmp_path):
    """(run dir, the process holding its lock): another process, as another daemon would be."""
    run_dir = tmp_path / "out" / "run"
    run_dir.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    yield run_dir, proc
    proc.kill()
    proc.wait()


def test_the_holder_is_named_and_the_lock_dies_with_a_kill_9(held):
    run_dir, proc = held
    assert holder_pid(run_dir) == proc.pid
    with pytest.raises(RunDirBusy, match=rf"^run dir {run_dir} is in use by another daemon \(pid {proc.pid}\): "):
        RunDirLock(run_dir).take_existing()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert holder_pid(run_dir) is None
    lock = RunDirLock(run_dir)
    lock.take_existing()
    assert lock.held and holder_pid(run_dir) == os.getpid()
    lock.release()
    assert holder_pid(run_dir) is None


def test_a_second_daemon_on_a_held_run_dir_exits_75_and_writes_nothing(tiny_trunk, held):
    run_dir, proc = held
    (run_dir / "state").mkdir()  # a restart: the lock is taken before the resume state is read
    result = daemon(sft_env(tiny_trunk, run_dir.parent))
    assert result.returncode == exitcodes.RUN_DIR_BUSY, result.stdout[-2000:] + result.stderr[-2000:]
    errors = [line for line in (result.stdout + result.stderr).splitlines() if "in use by another daemon" in line]
    assert len(errors) == 1 and f"run dir {run_dir} is in use by another daemon (pid {proc.pid})" in errors[0]
    assert "Traceback" not in result.stdout + result.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["state"]  # no run.log, no events: nothing written


def test_a_second_daemon_on_a_held_socket_exits_75_and_writes_nothing(tiny_trunk, tmp_path):
    """A first daemon of a fresh run binds its socket before it creates its run dir: a second one
    started meanwhile meets the socket, not the lock. The run is already running: 75, as for the
    lock (it was 78, a configuration error, which made a foreground sweep's member fatal)."""
    from tatu.daemon.control.server import ControlServer, socket_path

    env = sft_env(tiny_trunk, tmp_path / "out")
    with ControlServer(socket_path(env["TATU_RUN"]), {"status": lambda request: {}}):  # the first daemon's
        result = daemon(env)
    assert result.returncode == exitcodes.RUN_DIR_BUSY, result.stdout[-2000:] + result.stderr[-2000:]
    errors = [line for line in (result.stdout + result.stderr).splitlines() if "already listening" in line]
    assert len(errors) == 1 and f"TATU_RUN=run: another daemon is already listening at {socket_path('run')}" in errors[0]
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "out").exists()  # nothing written


def test_two_daemons_of_one_fresh_run_started_together_one_runs_and_the_other_exits_75(tiny_trunk, tmp_path):
    """Whichever check the second meets first (the socket, the run dir's lock, a resume state that
    appeared meanwhile), it exits 75 and writes nothing; the first runs to its verdict."""
    env = {**clean_environ(), **sft_env(tiny_trunk, tmp_path / "out", MIX_STEPS_LIMIT=2, EVAL_EVERY=2)}
    both = [subprocess.Popen([sys.executable, "-m", "tatu.daemon"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [proc.communicate(timeout=300)[0] for proc in both]
    codes = [proc.returncode for proc in both]
    assert sorted(codes) == [exitcodes.OK, exitcodes.RUN_DIR_BUSY], "\n".join(o[-1500:] for o in outputs)
    second = outputs[codes.index(exitcodes.RUN_DIR_BUSY)]
    assert "Traceback" not in second and not any(line.startswith("VERDICT") for line in second.splitlines())
    run_dir = tmp_path / "out" / "run"
    assert (run_dir / "verdict.json").is_file()
    assert (run_dir / "events.jsonl").read_text().count('"event": "config"') == 1  # one daemon ran there


def test_a_smoke_never_deletes_the_run_dir_of_a_smoke_still_running(tiny_trunk, tmp_path):
    from tatu.daemon.main import main as daemon_main

    smoke_dir = tmp_path / "run-smoke"  # where `tatu smoke` of TATU_RUN=run writes
    (smoke_dir / "state").mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(smoke_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        assert daemon_main(sft_env(tiny_trunk, tmp_path), smoke=True) == exitcodes.RUN_DIR_BUSY
        assert sorted(p.name for p in smoke_dir.iterdir()) == ["state"]  # the running smoke's files stay
    finally:
        proc.kill()
        proc.wait()
    # once nobody holds it, a smoke starts over: the old state is gone and a new run ran there
    assert daemon_main(sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=2), smoke=True) == 0
    assert (smoke_dir / "final").is_dir() and '"resumed"' not in (smoke_dir / "events.jsonl").read_text()


def test_a_fresh_start_does_not_start_over_a_state_that_appeared_meanwhile(tmp_path):
    run_dir = tmp_path / "run"
    lock = RunDirLock(run_dir)
    lock.take_existing()  # no run dir yet: a fresh start, nothing to lock
    assert not lock.held
    (run_dir / "state").mkdir(parents=True)  # another daemon ran and saved in between
    with pytest.raises(RunDirBusy, match="gained a resume state while this daemon started"):
        lock.take_created(resumed=False)
    assert not lock.held and holder_pid(run_dir) is None
    lock.take_created(resumed=True)  # a daemon that read that state itself goes on
    assert lock.held
    lock.release()


def test_a_rank_other_than_0_takes_nothing(tmp_path):
    lock = RunDirLock(tmp_path, active=False)
    lock.take_existing()
    lock.take_created(resumed=False)
    assert not lock.held and holder_pid(tmp_path) is None


def test_the_foreground_backend_sees_a_locked_member_as_running(held, tmp_path):
    run_dir, proc = held
    member = Member("m-s1", run_dir.name, "compare", "m", {}, 1, {"TATU_OUT": str(run_dir.parent)})
    backend = ForegroundBackend(tmp_path / "sweep")
    state = backend.poll(member)
    assert state.kind == "running" and f"pid {proc.pid}" in state.detail
    proc.kill()
    proc.wait()
    assert backend.poll(member).kind == "absent"


@pytest.mark.parametrize("code, first, after", [
    (exitcodes.RUN_DIR_BUSY, "running", "absent"),  # the holder is the member's daemon: watched, not counted
    (1, "absent", "absent"),                        # a crash: restarted (counted), whatever holds the dir
    (exitcodes.BAD_CONFIG, "exited", "absent"),     # what a restart cannot fix ends the member
])
def test_the_foreground_backend_watches_the_holder_when_its_own_child_exits_75(held, tmp_path, code, first, after):
    # The backend's child is a real process that exits with the code a second daemon would.
    run_dir, proc = held
    member = Member("m-s1", run_dir.name, "compare", "m", {}, 1, {"TATU_OUT": str(run_dir.parent)})
    backend = ForegroundBackend(tmp_path / "sweep")
    child = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    child.wait()
    backend.children[member.run] = child
    state = backend.poll(member)
    assert state.kind == first, state
    assert backend.crashes.get(member.run, 0) == (1 if code == 1 else 0)
    proc.kill()
    proc.wait()
    assert backend.poll(member).kind == after


CLAIM = """
import sys, time
from tatu.daemon.control.access import claim, ensure_private_dir
from tatu.daemon.control.client import resolve_socket
path = resolve_socket(sys.argv[1])
ensure_private_dir(path.parent)
claim(path)
print("claimed", flush=True)
time.sleep(600)
"""


def test_the_foreground_backend_sees_a_member_binding_its_socket_as_running(tmp_path):
    """A fresh member still loading has no run dir yet, and its socket may not answer yet (claimed,
    not bound): its claim says it runs, and a second daemon's 75 is watched, not a fresh start."""
    member = Member("m-s1", "claimed-run", "compare", "m", {}, 1, {"TATU_OUT": str(tmp_path / "out")})
    proc = subprocess.Popen([sys.executable, "-c", CLAIM, member.run], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "claimed"
        backend = ForegroundBackend(tmp_path / "sweep")
        child = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({exitcodes.RUN_DIR_BUSY})"])
        child.wait()
        backend.children[member.run] = child
        state = backend.poll(member)
        assert state.kind == "running" and f"pid {proc.pid}" in state.detail, state
    finally:
        proc.kill()
        proc.wait()
    assert backend.poll(member).kind == "absent"

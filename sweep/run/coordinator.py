"""The sweep coordinator: keeps at most K members running until every one has a result.

It holds no state of its own: each pass derives every member's status from its run dir and
its backend's unit state (tatu.sweep.run.members), so a coordinator killed at any moment and
started again -- by hand, by systemd, after a reboot -- continues where the files say.

Exit 10 is a result like any other. With a [tune] stage the tune members run first; when all
have results the value is chosen on the dev half of sftHeld and written into the lock, which
then lists the comparison members. `tatu sweep coordinate` (SWEEP_DIR from the
environment) is what units/tatu-sweep@.service runs; `tatu sweep start --foreground` runs the
same loop in the terminal with child processes.
"""
from __future__ import annotations

import fcntl
import os
import signal
import sys
import time
from pathlib import Path

from tatu import exitcodes
from tatu.daemon.run.paths import SweepDir
from tatu.atomic import write_json_atomic
from tatu.envfile import EnvFileError, parse_env_file
from tatu.formats import fmt_duration
from tatu.sweep.run import hparams
from tatu.sweep.run.backends import Backend, ForegroundBackend, SystemdBackend
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.interpolated import interpolated_members
from tatu.sweep.judge.interpolated import write_ready
from tatu.sweep.plan.lock import LockedPlan, read_lock, record_tuned
from tatu.sweep.judge.outcome import TERMINAL, read_json
from tatu.sweep.run.printed import sweep_command
from tatu.sweep.run.members import MemberStatus, member_status, member_wall_seconds, summary
from tatu.sweep.plan.member import Member
from tatu.tensorboard.writer import unavailable

POLL_SECONDS = 2.0
STOP_FILE = "stop.json"
SETTINGS_FILE = "coordinator.json"


class Coordinator:
    def __init__(self, sweep_dir: Path, backend: Backend, k: int, devices: list[str | None] | None = None,
                 out=None, poll_seconds: float = POLL_SECONDS, results_of=None):
        self.sweep_dir = Path(sweep_dir)
        self.backend = backend
        self.k = max(1, k)
        self.devices = devices or [None] * self.k
        self.out = out or sys.stdout
        self.poll_seconds = poll_seconds
        self.started_here: dict[str, str | None] = {}
        self.stopping = False
        self.notifier = _notifier()
        self.tensorboard_missing: str | None = None  # why no HParams session can be written ("" : they can)
        # a sequential design's looks read members' per-line scores (sweep/judge/analysis.member_result);
        # a finished member's never change, so each is read once per coordinator
        self.results_of = results_of
        self.results: dict = {}  # member run -> its sweep/judge/records.MemberResult
        self.schedule = None  # the last pass's sequential schedule (None: a fixed design)

    def say(self, text: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        print(text, file=self.out, flush=True)
        with open(self.sweep_dir / "coordinator.log", "a", encoding="utf-8") as log:
            log.write(f"{stamp} {text}\n")

    def notify(self, *lines: str) -> None:
        if self.notifier is not None:
            self.notifier.notify("\n".join(line.encode("ascii", "replace").decode() for line in lines))

    # --- one pass ------------------------------------------------------------------------------
    def stage_members(self) -> tuple[LockedPlan, str | None, list[Member]]:
        locked = read_lock(self.sweep_dir)
        if locked.tuning:
            return locked, "tune", locked.members_of("tune")
        return locked, ("compare" if locked.plan.tune_var else None), locked.members_of("compare")

    def statuses(self, members: list[Member]) -> list[MemberStatus]:
        return [member_status(m, self.backend.poll(m)) for m in members]

    def pass_once(self) -> tuple[str, list[MemberStatus], str | None]:
        """('running' | 'finished' | 'fatal' | 'tune-complete', statuses, stage)."""
        locked, stage, members = self.stage_members()
        statuses = self.statuses(members)
        if stage != "tune":  # interpolated members: written once their parents have an end
            write_ready(self.sweep_dir, interpolated_members(locked.plan.interpolate, members), self.say)
        if locked.plan.design and stage != "tune":  # sequential: only the members the looks allow
            self.schedule = self.sequential(locked, statuses)
            statuses = [s for s in statuses if s.member.run in self.schedule.allowed]
        fatal = [s for s in statuses if s.state == "fatal"]
        if fatal:
            return "fatal", statuses, stage
        if all(s.state in TERMINAL for s in statuses):
            if stage == "tune":
                return "tune-complete", statuses, stage
            return "finished", statuses, stage
        running = [s for s in statuses if s.alive]  # a slot is free once the process has exited
        free = self.free_devices(running)
        for status in statuses:
            if status.state != "pending" or len(running) >= self.k or self.stopping:
                continue
            device = free.pop(0) if free else None
            self.backend.start(status.member, device)
            self.started_here[status.member.run] = device
            running.append(status)
            self.say(f"started {status.member.name}" + (f" on {device}" if device else "")
                     + (f" ({status.detail})" if status.detail and status.detail != "inactive" else ""))
        return "running", statuses, stage

    def sequential(self, locked: LockedPlan, statuses: list[MemberStatus]):
        """The looks the files allow, appended to the looks log before anything starts from them
        (sweep/judge/schedule.py: the same for every backend, and after a kill -9)."""
        from tatu.sweep.judge import looks_log
        from tatu.sweep.judge.schedule import schedule
        from tatu.sweep.judge.looks_text import look_line

        plan = schedule(locked, {s.member.run: s.state for s in statuses}, looks_log.read(self.sweep_dir),
                        lambda member: self.member_result(locked, member), SweepDir(self.sweep_dir).looks_file)
        for entry in plan.to_log:
            looks_log.append(self.sweep_dir, entry)
            self.say(look_line(entry))
        return plan

    def member_result(self, locked: LockedPlan, member: Member):
        if member.run not in self.results:
            if self.results_of is not None:
                self.results[member.run] = self.results_of(member)
            else:
                from tatu.sweep.judge.analysis import member_result
                from tatu.sweep.judge.schedule import required_sets

                self.results[member.run] = member_result(member, self.sweep_dir, required_sets(locked.plan.rule))
        return self.results[member.run]

    def free_devices(self, running: list[MemberStatus]) -> list[str | None]:
        if not any(self.devices):
            return []
        used = set()
        for status in running:
            device = self.started_here.get(status.member.run)
            if device is None:
                path = self.backend.env_path(status.member)
                device = parse_env_file(path).get("TATU_DEVICE") if path.is_file() else None
            used.add(device)
        return [d for d in self.devices if d not in used]

    def record_session(self, status: MemberStatus) -> None:
        """A member with a result: its TensorBoard HParams session (once; unless its TATU_TENSORBOARD
        is off). A failure is a line of the coordinator's log, never the sweep's end."""
        if status.state not in TERMINAL or not hparams.wanted(status.member):
            return
        if self.tensorboard_missing is None:
            self.tensorboard_missing = unavailable() or ""
            if self.tensorboard_missing:
                self.say(f"TensorBoard: no HParams sessions ({self.tensorboard_missing}); "
                         f"`tatu tensorboard {self.sweep_dir}` writes them later")
        if not self.tensorboard_missing:
            hparams.write_session(self.sweep_dir / hparams.SESSIONS, read_lock(self.sweep_dir), status, self.say)

    def choose_tuned(self, locked: LockedPlan, members: list[Member]) -> None:
        from tatu.sweep.judge.tune import select_tuned

        tuned = select_tuned(self.sweep_dir, locked, members)
        record_tuned(self.sweep_dir, locked, tuned)
        self.say(f"tune: {tuned.var}={tuned.value} chosen on the dev half of sftHeld "
                 f"({tuned.reason}); locked; the comparison stage starts")

    def eta(self, statuses: list[MemberStatus]) -> float | None:
        walls = [w for s in statuses if s.state in TERMINAL for w in [member_wall_seconds(s.member)] if w]
        if not walls:
            return None
        remaining = sum(s.state in ("pending", "running") for s in statuses)
        return remaining * (sum(walls) / len(walls)) / self.k

    # --- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        # One coordinator per sweep: two would start the same member twice. The lock dies with
        # its holder, so a killed coordinator never blocks the next.
        self._lock = open(self.sweep_dir / "coordinator.lock", "a+")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.say("another coordinator is running this sweep; this one exits")
            return 1
        stop = read_json(self.sweep_dir / STOP_FILE)
        if stop is not None:
            self.say(f"sweep stopped: {stop.get('reason')}; `tatu sweep start` continues it")
            self.notify("READY=1", f"STATUS=stopped: {stop.get('reason')}")
            return int(stop.get("code", 0))
        previous = {}
        ready = False
        self.say(f"coordinator up (pid {os.getpid()}, {self.backend.name} backend, K={self.k})")
        started = time.monotonic()

        def on_term(*_):
            self.stopping = True

        old = signal.signal(signal.SIGTERM, on_term)
        try:
            while True:
                outcome, statuses, stage = self.pass_once()
                for s in statuses:
                    if previous.get(s.member.run) != s.state and s.state in TERMINAL + ("fatal",):
                        self.say(f"{s.member.name}: {s.state}" + (f" ({s.verdict})" if s.verdict and s.verdict != s.state else "")
                                 + (f": {s.detail}" if s.detail else ""))
                        self.record_session(s)
                    previous[s.member.run] = s.state
                text = summary(statuses, self.eta(statuses), stage)
                self.notify(*(["READY=1"] if not ready else []), f"STATUS={text}")
                ready = True
                if outcome == "tune-complete":
                    self.choose_tuned(read_lock(self.sweep_dir), [s.member for s in statuses])
                    continue
                if outcome == "finished":
                    if self.schedule is not None:
                        self.say_verdict(statuses)
                    self.say(f"sweep finished: {text}; {self.took(started)}; `{sweep_command('report', self.sweep_dir)}`")
                    self.notify(f"STATUS=finished: {text}")
                    return 0
                if outcome == "fatal":
                    return self.fail([s for s in statuses if s.state == "fatal"], statuses)
                if self.stopping or read_json(self.sweep_dir / STOP_FILE) is not None:
                    return self.stop_members(statuses)
                time.sleep(self.poll_seconds)
        finally:
            signal.signal(signal.SIGTERM, old)

    def say_verdict(self, statuses: list[MemberStatus]) -> None:
        from tatu.sweep.judge.verdict import runs_line, verdict_sentence

        plan = read_lock(self.sweep_dir).plan
        states = {s.member.run: s.state for s in statuses}
        self.say(runs_line(self.schedule, states))
        self.say(verdict_sentence(plan, self.schedule))

    def took(self, started: float) -> str:
        """This coordinator's wall time beside the estimate `tatu sweep start` made for it."""
        estimate = settings(self.sweep_dir).get("estimate_s")
        shown = f"estimated {fmt_duration(estimate)}" if estimate is not None else "no estimate (no measured run)"
        return f"took {fmt_duration(time.monotonic() - started)} ({shown} at K={self.k})"

    def fail(self, fatal: list[MemberStatus], statuses: list[MemberStatus]) -> int:
        first = fatal[0]
        code = first.code if first.code in (exitcodes.BAD_DATA, exitcodes.BAD_CONFIG) else exitcodes.BAD_CONFIG
        detail = first.detail or self.backend.last_error(first.member) or "no error line in its log"
        log_of = getattr(self.backend, "log_of", None)  # a test's stand-in backend may have no log
        log = f" (its log: {log_of(first.member)})" if log_of else ""
        reason = f"member {first.member.name} exited {first.code}: {detail}{log}"
        write_json_atomic(self.sweep_dir / STOP_FILE, {"reason": reason, "code": code, "member": first.member.name},
                          sort_keys=True)
        for s in statuses:
            if s.state == "running":
                self.backend.stop(s.member)
        self.say(f"sweep stopped: {reason}")
        self.notify(f"STATUS=stopped: {reason}"[:200])
        self._wait_foreground()
        return code

    def stop_members(self, statuses: list[MemberStatus]) -> int:
        # SIGTERM of a systemd coordinator leaves its members running (they are units of their
        # own; a restarted coordinator finds them); a `tatu sweep stop` or a foreground/ray ^C stops
        # them (child processes, or Ray tasks that Ray would end with their driver anyway).
        if read_json(self.sweep_dir / STOP_FILE) is not None or not isinstance(self.backend, SystemdBackend):
            for s in statuses:
                if s.state == "running":
                    self.backend.stop(s.member)
            self._wait_foreground()
        self.say("coordinator stopping; members with results keep them, the others resume when started again")
        return 0

    def _wait_foreground(self) -> None:
        wait_all = getattr(self.backend, "wait_all", None)  # foreground, ray: members the coordinator owns
        if wait_all is not None:
            wait_all()


def _notifier():
    if not os.environ.get("NOTIFY_SOCKET"):
        return None
    import sdnotify

    return sdnotify.SystemdNotifier()


def backend_for(kind: str, sweep_dir: Path, ray_cpus: int = 1) -> Backend:
    """The backend a sweep's coordinator.json names: systemd (the default), foreground or ray."""
    if kind == "ray":
        from tatu.sweep.run.ray import RayBackend  # the tatu[ray] extra: imported only when asked for

        return RayBackend(sweep_dir, ray_cpus)
    return ForegroundBackend(sweep_dir) if kind == "foreground" else SystemdBackend()


def settings(sweep_dir: Path) -> dict:
    return read_json(Path(sweep_dir) / SETTINGS_FILE) or {}


def devices_for(k: int, base_device: str) -> list[str | None]:
    """One CUDA device per slot when the members would use CUDA and there are enough GPUs."""
    if base_device not in ("auto", "cuda"):
        return [None] * k
    try:
        import torch

        count = torch.cuda.device_count()
    except Exception:
        count = 0
    return [f"cuda:{i}" for i in range(k)] if count >= k and count > 0 else [None] * k


def main() -> int:
    sweep_dir = os.environ.get("SWEEP_DIR")
    if not sweep_dir:
        print("tatu sweep coordinator: SWEEP_DIR is not set (the unit's env file sets it)", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    conf = settings(Path(sweep_dir))
    k = int(conf.get("k", 1))
    backend = backend_for(conf.get("backend", "systemd"), Path(sweep_dir))
    try:
        return Coordinator(Path(sweep_dir), backend, k, conf.get("devices")).run()
    except (EnvFileError, SweepError) as exc:  # a member's env file, the lock: one line and its code
        print(f"tatu sweep coordinator: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())

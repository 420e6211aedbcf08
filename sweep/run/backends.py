"""Where a sweep's members run: the small interface a coordinator needs, and two backends.

    start(member, device)  start the member's daemon (its env already has everything else)
    poll(member)           UnitState: running, exited with a code, or absent (never started,
                           stopped, or unknown after a reboot)
    stop(member)           ask it to stop gracefully (the daemon saves its resume state)
    env_path(member)       where its env file is (the device a running member was given)
    last_error(member)     the member's last error line (a 65/78 may stop it before its run's log)

What a member *achieved* is never asked of a backend: it is read from the run dir
(its verdict and events: tatu.daemon.run.paths), so a coordinator restarted on another backend state, or after a
reboot, derives the same thing. The Ray backend (tatu.sweep.run.ray) implements the same five methods.

- systemd (the default): each member is a `tatu-sft@<run>.service` instance with its env file
  at $XDG_CONFIG_HOME/tatu/<run>.env; a crash is the unit's own restart (Restart=on-failure).
- foreground: members are child processes of the coordinator (`python -m tatu.daemon`); a
  crash is restarted here, at most CRASH_RESTARTS times; a child gets SIGTERM when the
  coordinator dies (PR_SET_PDEATHSIG), saves and exits, and a restarted coordinator waits for
  a member whose daemon still holds its run dir's lock (tatu.daemon.run.lock) or its control
  socket instead of starting it twice. One it started anyway (the first had neither yet) exits
  75 on meeting either, and is watched like that: the holder runs, then the member resumes.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tatu import exitcodes, systemctl
from tatu.daemon.run.paths import SweepDir
from tatu.atomic import write_atomic
from tatu.daemon.config import PREFIXES as RUN_PREFIXES
from tatu.daemon.control.access import claim_path
from tatu.daemon.control.client import ControlError, answers, request, resolve_socket
from tatu.daemon.run.lock import holder_pid
from tatu.envfile import env_file_text
from tatu.systemctl import SystemctlError, systemctl_user
from tatu.sweep.plan.member import Member

CRASH_RESTARTS = 4  # like the unit's StartLimitBurst=5: five starts, then it is the sweep's problem
_NOT_INHERITED = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "RUNTIME_DIRECTORY", "JOURNAL_STREAM", "SWEEP_DIR")


@dataclass(frozen=True)
class UnitState:
    kind: str                # "running" | "exited" | "absent"
    code: int | None = None  # exit status when exited (a signal: 128 + its number)
    detail: str = ""


class Backend(Protocol):
    name: str

    def start(self, member: Member, device: str | None) -> None: ...
    def poll(self, member: Member) -> UnitState: ...
    def stop(self, member: Member) -> None: ...
    def env_path(self, member: Member) -> Path: ...
    def last_error(self, member: Member) -> str: ...
    def log_of(self, member: Member) -> str: ...  # where its output is: a file, or the command that shows it


def member_env(member: Member, device: str | None) -> dict[str, str]:
    env = dict(member.env)
    if device:
        env["TATU_DEVICE"] = device
    return env


def write_private(path: Path, text: str) -> None:
    """An env file: it may hold paths and tokens, so 0600 in a 0700 directory, written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    write_atomic(path, text, mode=0o600)


# --- foreground ----------------------------------------------------------------------------------

def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.setpgrp()  # a ^C in the coordinator's terminal goes to the coordinator, which stops members


class ForegroundBackend:
    name = "foreground"

    def __init__(self, sweep_dir: Path):
        self.sweep_dir = Path(sweep_dir)
        self.children: dict[str, subprocess.Popen] = {}
        self.crashes: dict[str, int] = {}

    def env_path(self, member: Member) -> Path:
        return SweepDir(self.sweep_dir).env_file(member.run)

    def start(self, member: Member, device: str | None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(RUN_PREFIXES) and k not in _NOT_INHERITED}
        env.update(member_env(member, device), PYTHONUNBUFFERED="1")
        write_private(self.env_path(member), env_file_text(member_env(member, device)))
        log_path = self.sweep_dir / "logs" / f"{member.name}.out"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self.children[member.run] = subprocess.Popen(
                [sys.executable, "-m", "tatu.daemon", "--env-file", str(self.env_path(member))], env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def poll(self, member: Member) -> UnitState:
        child = self.children.get(member.run)
        if child is not None:
            code = child.poll()
            if code is None:
                return UnitState("running", detail=f"pid {child.pid}")
            del self.children[member.run]
            code = 128 - code if code < 0 else code
            if code != exitcodes.RUN_DIR_BUSY:  # 75: the holder is the member's daemon; the lock below says if it runs
                if code in (exitcodes.OK, *exitcodes.NOT_RESTARTED):
                    return UnitState("exited", code)
                self.crashes[member.run] = self.crashes.get(member.run, 0) + 1
                if self.crashes[member.run] <= CRASH_RESTARTS:
                    return UnitState("absent", detail=f"crashed with {code}; restarting")
                return UnitState("exited", code)
        # A member of an earlier coordinator: its daemon holds the run dir's lock from its start to
        # its death (loading and shutting down too, when its socket does not answer); a fresh run
        # still loading has no dir yet, only its socket, claimed from before it binds (75 said which).
        holder = holder_pid(member.run_dir) or holder_pid(claim_path(resolve_socket(member.run)))
        if holder is not None or _socket_answers(member.run):
            return UnitState("running", detail="started by an earlier coordinator" + (f" (pid {holder})" if holder else ""))
        return UnitState("absent")

    def stop(self, member: Member) -> None:
        child = self.children.get(member.run)
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
        elif _socket_answers(member.run):
            try:
                request(resolve_socket(member.run), "stop")
            except ControlError:
                pass

    def last_error(self, member: Member) -> str:
        return _last_error_line((self.sweep_dir / "logs" / f"{member.name}.out"))

    def log_of(self, member: Member) -> str:
        return str(self.sweep_dir / "logs" / f"{member.name}.out")

    def wait_all(self, timeout: float = 600) -> None:
        for child in list(self.children.values()):
            try:
                child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


# A refusal in tatu's voice ("tatu: TATU_DATA=...: no such data directory", "tatu run: FILE:LINE: ..."),
# after the journal's priority prefix if any: the reason a member ended before its first step.
REFUSAL = re.compile(r"^(?:<[0-7]>)?tatu(?: [a-z]+)?: ")


def _pick_error(lines: list[str]) -> str:
    errors = [REFUSAL.sub("", line.strip()) for line in lines
              if "error" in line.lower() or REFUSAL.match(line.strip())]
    return errors[-1].removeprefix("ERROR: ") if errors else ""


def _last_error_line(path: Path) -> str:
    try:
        return _pick_error(path.read_text(encoding="utf-8", errors="replace").splitlines()[-50:])
    except OSError:
        return ""


def _socket_answers(run: str) -> bool:
    return answers(resolve_socket(run))


# --- systemd ---------------------------------------------------------------------------------------

def member_unit(member: Member) -> str:
    return f"tatu-sft@{member.run}.service"


class SystemdBackend:
    name = "systemd"

    def env_path(self, member: Member) -> Path:
        return systemctl.unit_env_dir() / f"{member.run}.env"  # what tatu-sft@ reads: %E/tatu/%i.env

    def start(self, member: Member, device: str | None) -> None:
        write_private(self.env_path(member), env_file_text(member_env(member, device)))
        unit = member_unit(member)
        _quiet("reset-failed", unit)  # a member failed before (e.g. its start limit): start afresh
        # --no-block: a Type=notify start waits for the baseline eval; the coordinator must not.
        systemctl_user("start", "--no-block", unit)

    def poll(self, member: Member) -> UnitState:
        shown = systemctl.show(member_unit(member), "LoadState", "ActiveState", "SubState", "Result", "ExecMainStatus",
                     "ExecMainCode", "NRestarts")
        active = shown.get("ActiveState", "")
        if active in ("active", "activating", "deactivating", "reloading"):
            return UnitState("running", detail=f"{active}/{shown.get('SubState')} restarts {shown.get('NRestarts')}")
        if active == "failed":
            code = int(shown.get("ExecMainStatus") or 0)
            if shown.get("ExecMainCode") == "2":  # killed by a signal
                code = 128 + code
            return UnitState("exited", code, detail=f"failed ({shown.get('Result')})")
        return UnitState("absent", detail=active)

    def stop(self, member: Member) -> None:
        systemctl_user("stop", "--no-block", member_unit(member))

    def last_error(self, member: Member) -> str:
        # By SyslogIdentifier (the unit sets tatu-sft-%i): it finds the lines wherever the cgroup is.
        binary = shutil.which("journalctl")
        if binary is None:
            return ""
        proc = subprocess.run([binary, "--user", "--no-pager", "-o", "cat", "-n", "50", "-t", f"tatu-sft-{member.run}"],
                              capture_output=True, text=True, timeout=30)
        return _pick_error(proc.stdout.splitlines())

    def log_of(self, member: Member) -> str:
        return f"journalctl --user -t tatu-sft-{member.run}"


def _quiet(*args: str) -> None:
    try:
        systemctl_user(*args, check=False)
    except SystemctlError:  # no systemctl: nothing to reset
        pass

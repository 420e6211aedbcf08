"""A real `systemd --user` (and journald) for tests, on machines where PID 1 is not systemd.

In order: this process leaves the root cgroup, the /run/systemd/system marker that
`systemd --user` needs is created if absent, journald is started if none runs, then the
manager, with its own runtime and config directories. Use it as a fixture:

    from systemd_harness import user_manager   # tests/ is on sys.path (rootdir-relative import)

    def test_x(user_manager):
        user_manager.install_unit("x.service", text)
        user_manager.systemctl("start", "x.service")

Everything started here is undone in a finally: the units stopped, the manager and
journald killed by the PIDs started here, this process moved back to its cgroups, the
child cgroups removed deepest first, the marker and journald's files removed only if
created here. Skips with the reason where it cannot run; fails instead when
CI_STRICT=1 (CI).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from strict import cannot_run
from tiny_world import RUN_PREFIXES, wait_for

CGROUP_ROOT = Path("/sys/fs/cgroup")
# The v1 hierarchies a user manager touches, plus the v2 one.
V1_HIERARCHIES = ("name=systemd", "pids", "memory", "cpu")
SYSTEMD_MARKER = Path("/run/systemd/system")
JOURNALD = Path("/lib/systemd/systemd-journald")
JOURNALD_RUNTIME = (Path("/run/systemd/journal"), Path("/run/log/journal"))


def _cannot_run(reason: str):
    cannot_run(f"systemd harness cannot run: {reason}")


def systemd_binary() -> Path | None:
    for candidate in (Path("/usr/lib/systemd/systemd"), Path("/lib/systemd/systemd"), Path("/usr/bin/systemd")):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


# -- cgroups ------------------------------------------------------------------------------

def _cgroup_mounts() -> dict[str, Path]:
    """hierarchy key ("memory", "name=systemd", "" for v2) -> mount point, from /proc/self/mountinfo."""
    mounts: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype, _source, super_options = (right.split() + ["", ""])[:3]
        mount_point = Path(left.split()[4])
        if fstype == "cgroup2":
            mounts.setdefault("", mount_point)
        elif fstype == "cgroup":
            for option in super_options.split(","):
                if option in ("cpu", "pids", "memory") or option.startswith("name="):
                    mounts.setdefault(option, mount_point)
    return mounts


def _own_cgroups() -> dict[str, str]:
    """hierarchy key -> this process's cgroup path in it, from /proc/self/cgroup."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            own[""] = path
        for controller in controllers.split(","):
            own[controller] = path
    return own


@dataclass
class _CgroupMove:
    original: Path  # the cgroup directory this process came from
    child: Path     # the one created for the test


def _enter_child_cgroups(tag: str) -> list[_CgroupMove]:
    mounts, own = _cgroup_mounts(), _own_cgroups()
    wanted = [key for key in V1_HIERARCHIES if key in mounts and key in own]
    if "" in mounts and "" in own:
        wanted.append("")
    if "" not in wanted and "name=systemd" not in wanted:
        raise RuntimeError(f"no systemd-usable cgroup hierarchy found (mounts {sorted(mounts)})")
    moves: list[_CgroupMove] = []
    seen_mounts = set()
    try:
        for key in wanted:
            mount = mounts[key]
            if mount in seen_mounts:  # co-mounted controllers, e.g. cpu,cpuacct
                continue
            seen_mounts.add(mount)
            original = mount / own[key].lstrip("/")
            child = original / tag
            child.mkdir()
            moves.append(_CgroupMove(original, child))
            (child / "cgroup.procs").write_text(str(os.getpid()))
    except BaseException:
        _leave_child_cgroups(moves)
        raise
    return moves


def _pids_in(cgroup: Path) -> set[int]:
    pids = set()
    for directory, _dirs, files in os.walk(cgroup):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in Path(directory, "cgroup.procs").read_text().split())
    return pids


def _leave_child_cgroups(moves: list[_CgroupMove]) -> list[str]:
    problems = []
    me = os.getpid()
    for move in moves:
        with contextlib.suppress(OSError):
            (move.original / "cgroup.procs").write_text(str(me))
    # Anything still inside was started by this test (the manager's units): kill by PID.
    for move in moves:
        for pid in _pids_in(move.child) - {me}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for move in moves:
        if not move.child.exists():
            continue
        deadline = time.monotonic() + 10
        while True:
            leftovers = [Path(d) for d, _, _ in os.walk(move.child, topdown=False)]
            try:
                for directory in leftovers:  # deepest first: the manager nests app.slice/...
                    directory.rmdir()
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    problems.append(f"could not remove cgroup {exc.filename}: {exc.strerror}")
                    break
                time.sleep(0.1)
    return problems


# -- the manager ----------------------------------------------------------------------------

@dataclass
class UserManager:
    runtime_dir: Path
    config_home: Path
    process: subprocess.Popen
    journald: subprocess.Popen | None
    installed: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(XDG_RUNTIME_DIR=str(self.runtime_dir), XDG_CONFIG_HOME=str(self.config_home))
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)  # talk to this manager's private socket
        return env

    @property
    def unit_dir(self) -> Path:
        return self.config_home / "systemd" / "user"

    @property
    def journal_available(self) -> bool:
        return Path("/run/systemd/journal/socket").exists() and _journald_pid() is not None

    def systemctl(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run(["systemctl", "--user", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"systemctl --user {' '.join(args)} exited {proc.returncode}: "
                                 f"{proc.stderr.strip()} {proc.stdout.strip()}")
        return proc

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        args = ["show", unit] + [f"-p{p}" for p in properties]
        values = {}
        for line in self.systemctl(*args).stdout.splitlines():
            key, _, value = line.partition("=")
            values[key] = value
        return values

    def journalctl(self, *args: str, timeout: float = 60) -> str:
        proc = subprocess.run(["journalctl", "--no-pager", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        return proc.stdout

    def install_unit(self, name: str, text: str, reload: bool = True) -> Path:
        self.unit_dir.mkdir(parents=True, exist_ok=True)
        path = self.unit_dir / name
        path.write_text(text)
        if name not in self.installed:
            self.installed.append(name)
        if reload:
            self.systemctl("daemon-reload")
        return path

    def wait_for(self, predicate, timeout: float = 30, interval: float = 0.2, what: str = "condition"):
        return wait_for(predicate, timeout, what, interval)

    def drop_in(self, unit: str, text: str) -> Path:
        """UNIT.d/test.conf under this manager's unit dir (read at the next daemon-reload)."""
        path = self.unit_dir / f"{unit}.d" / "test.conf"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def kill_main_and_wait_restart(self, unit: str, timeout: float = 60) -> dict[str, str]:
        """SIGKILL the unit's main process (not its children) and wait until systemd has started it
        again: active under a new MainPID, NRestarts one up. Returns those properties."""
        before = self.show(unit, "MainPID", "NRestarts")
        old_pid = int(before["MainPID"])
        self.systemctl("kill", "-s", "SIGKILL", "--kill-whom=main", unit)

        def restarted():
            shown = self.show(unit, "MainPID", "NRestarts", "ActiveState")
            return shown if shown["ActiveState"] == "active" and int(shown["MainPID"]) not in (0, old_pid) else None

        shown = self.wait_for(restarted, timeout=timeout, interval=0.2, what=f"systemd to restart the killed {unit}")
        assert int(shown["NRestarts"]) == int(before["NRestarts"]) + 1, (before, shown)
        return shown


def scrub_environment_for_units(mp: pytest.MonkeyPatch) -> None:
    """A manager hands its environment to its units: no stray run variable of the caller may
    reach a daemon's config check, nor this process's own systemd variables its notify code."""
    for name in list(os.environ):
        if name.startswith(RUN_PREFIXES):
            mp.delenv(name)
    for name in ("RUNTIME_DIRECTORY", "NOTIFY_SOCKET", "JOURNAL_STREAM", "WATCHDOG_USEC", "WATCHDOG_PID"):
        mp.delenv(name, raising=False)


def address_the_manager(mp: pytest.MonkeyPatch, um: UserManager) -> None:
    """`systemctl --user` and `tatu units install` in this process talk to `um`, as a user's
    shell talks to its own manager (through the runtime dir's bus socket, not D-Bus's)."""
    mp.setenv("XDG_RUNTIME_DIR", str(um.runtime_dir))
    mp.setenv("XDG_CONFIG_HOME", str(um.config_home))
    mp.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)


def _journald_pid() -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.readlink(entry / "exe").endswith("systemd-journald"):
                return int(entry.name)
    return None


def _stop(process: subprocess.Popen | None, grace: float) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@contextlib.contextmanager
def user_manager_session(start_journald: bool = True):
    if os.geteuid() != 0:
        _cannot_run("needs root (cgroups, /run/systemd/system)")
    systemd = systemd_binary()
    if systemd is None or shutil.which("systemctl") is None:
        _cannot_run("systemd / systemctl not installed")
    if not CGROUP_ROOT.is_dir():
        _cannot_run(f"{CGROUP_ROOT} missing")
    if Path("/proc/1/comm").read_text().strip() == "systemd":
        _cannot_run("PID 1 is systemd here: use the machine's own user manager instead")

    tag = f"tatu-test-{os.getpid()}"
    moves: list[_CgroupMove] = []
    created_marker = False
    journald: subprocess.Popen | None = None
    manager: subprocess.Popen | None = None
    temp_root = Path(tempfile.mkdtemp(prefix="tatu-um-", dir="/tmp"))  # short: AF_UNIX path limit
    runtime_dir, config_home = temp_root / "rt", temp_root / "cfg"
    runtime_dir.mkdir(mode=0o700)
    config_home.mkdir(mode=0o700)
    problems: list[str] = []
    um: UserManager | None = None
    try:
        # 1. Never from the root cgroup: the manager would pull every process, PID 1
        #    included, into its init.scope.
        try:
            moves = _enter_child_cgroups(tag)
        except (OSError, RuntimeError) as exc:
            _cannot_run(f"cannot create child cgroups: {exc}")
        # 2. systemd --user refuses to start without it.
        if not SYSTEMD_MARKER.exists():
            SYSTEMD_MARKER.mkdir(parents=True)
            created_marker = True
        # 3. journald, only if none runs (judged by process, not by its leftover socket).
        if start_journald and _journald_pid() is None and JOURNALD.is_file():
            journald = subprocess.Popen([str(JOURNALD)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
            deadline = time.monotonic() + 15
            while not Path("/run/systemd/journal/stdout").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        # 4. The manager.
        env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime_dir), XDG_CONFIG_HOME=str(config_home))
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        manager_log = open(temp_root / "manager.log", "wb")
        manager = subprocess.Popen([str(systemd), "--user"], env=env, stdout=manager_log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        manager_log.close()
        private = runtime_dir / "systemd" / "private"
        deadline = time.monotonic() + 30
        while not private.exists():
            if manager.poll() is not None or time.monotonic() > deadline:
                log = (temp_root / "manager.log").read_text(errors="replace")[-2000:]
                raise AssertionError(f"systemd --user did not come up (exit {manager.poll()}): {log}")
            time.sleep(0.1)
        um = UserManager(runtime_dir, config_home, manager, journald)
        yield um
    finally:
        # 6. Undo everything, in reverse.
        if um is not None and manager.poll() is None:
            for unit in um.installed:
                with contextlib.suppress(Exception):
                    um.systemctl("stop", unit, check=False, timeout=60)
        if manager is not None:
            _stop(manager, grace=20)  # SIGTERM: the manager stops its units in order
        if journald is not None:
            _stop(journald, grace=5)
            for path in JOURNALD_RUNTIME:
                shutil.rmtree(path, ignore_errors=True)
        problems += _leave_child_cgroups(moves)
        if created_marker:
            with contextlib.suppress(OSError):
                SYSTEMD_MARKER.rmdir()
        shutil.rmtree(temp_root, ignore_errors=True)
        if problems:
            raise AssertionError("systemd harness cleanup: " + "; ".join(problems))


@pytest.fixture
def user_manager():
    with user_manager_session() as manager:
        yield manager


# Restarts within a second: a killed coordinator or member is back while the test waits.
FAST_RESTART = "[Service]\nRestartSec=1s\n"


@contextlib.contextmanager
def sweep_units_session(workdir: Path, sweep: str, members: tuple[str, ...]):
    """A user manager with tatu's units installed (`tatu units install`, workdir `workdir`) and
    restarting fast, addressed by this process's `systemctl --user` and tatu. Yields (manager, the
    install's result). At the end the sweep's coordinator and its members' units are stopped."""
    from tatu.ops.units import install_units

    with pytest.MonkeyPatch.context() as mp:
        scrub_environment_for_units(mp)
        with user_manager_session() as um:
            address_the_manager(mp, um)
            workdir.mkdir(parents=True, exist_ok=True)
            for unit in ("tatu-sft@.service", "tatu-sweep@.service"):
                um.drop_in(unit, FAST_RESTART)
            installed = install_units(workdir=workdir)
            try:
                yield um, installed
            finally:
                um.systemctl("stop", f"tatu-sweep@{sweep}.service", check=False, timeout=120)
                for member in members:
                    um.systemctl("stop", f"tatu-sft@{sweep}.{member}.service", check=False, timeout=120)

"""One daemon per run dir: an exclusive flock on the directory itself, held for the process's life.

Two daemons on one run dir would read and overwrite each other's resume state. The control
socket cannot prevent that on its own: it is bound only after the resume state is read, and
a daemon still loading, or already shutting down, does not answer on it. The lock is taken
before the resume state is read (a restart) or when the run dir is created (a fresh run), on
rank 0 only (the other ranks of a torchrun job read the state under rank 0's lock). A flock
belongs to the open file, so the kernel drops it the moment the process dies, kill -9
included: a killed daemon never blocks its restart. A second daemon exits 75 (EX_TEMPFAIL, not
restarted by the units: a restart would only race the holder) with one line naming the dir and
the holder's pid.

`holder_pid(run_dir)` reads /proc/locks without taking the lock: the foreground sweep backend
asks it whether a member started by an earlier coordinator still runs.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from tatu.daemon.run.paths import RunDir


class RunDirBusy(RuntimeError):
    """The run is already running (exit 75, not restarted): another process holds this run dir, or
    (raised by the Supervisor) the run's control socket, which a starting daemon binds before it
    creates a fresh run's dir."""


def holder_pid(run_dir: Path) -> int | None:
    """The pid holding a flock on `run_dir`, from /proc/locks; None when nobody does (or it is unknown)."""
    try:
        st = os.stat(run_dir)
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:2156134 0 EOF"; a waiter's line has "->" after the number
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode:
            return int(fields[4])
    return None


class RunDirLock:
    """The run dir's lock for one daemon run; released by `release` (or the process's death)."""

    def __init__(self, run_dir: Path, active: bool = True):
        self.run_dir = Path(run_dir)
        self.active = active  # False: a torchrun rank other than 0, which takes nothing
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def take_existing(self, empty: bool = False) -> None:
        """Before the resume state is read: lock the run dir if it exists (a restart); `empty`:
        then remove what it holds, under the lock (`tatu smoke` starts over every time, and never
        deletes a directory another daemon is using)."""
        if self.active and self.run_dir.is_dir():
            self._take()
            if empty:
                self._empty()

    def _empty(self) -> None:
        for child in self.run_dir.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    def take_created(self, resumed: bool) -> None:
        """When the run dir is created for writing: lock it if `take_existing` found none. A fresh
        start that now finds a resume state there lost a race with another daemon that ran
        meanwhile: it must not start over that state (a restart resumes it)."""
        if self.held or not self.active:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._take()
        if not resumed and RunDir(self.run_dir).has_resume():  # what only a daemon that ran here leaves
            self.release()
            raise RunDirBusy(f"run dir {self.run_dir} gained a resume state while this daemon started (another "
                             f"daemon ran on it meanwhile); starting again resumes it")

    def _take(self) -> None:
        fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY)  # non-inheritable (Python's default): no child holds the lock
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = holder_pid(self.run_dir)
            raise RunDirBusy(f"run dir {self.run_dir} is in use by another daemon "
                             f"(pid {pid if pid is not None else 'unknown'}): one daemon per run dir") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

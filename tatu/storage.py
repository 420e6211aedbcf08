"""Disk space: what a save needs, what the disk has, and the one-line error when it is not enough.

A full disk is not a crash to restart (the next start fails the same way) and not bad data:
StorageError maps to its own exit code (74, EX_IOERR) in daemon/main.py. Light on purpose:
the logs and the checkpoint writer both use it.
"""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

BLOCK = 4096  # a file takes whole blocks: what `needed` rounds each file up to
# errnos that say "this storage cannot take the write", not "this program is wrong".
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG}


class StorageError(Exception):
    """A write the storage refused: the message names the path and the free space."""


def free_bytes(path: str | Path) -> int:
    """Bytes free for this user on the file system holding `path` (its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def mb(n_bytes: float) -> str:
    return f"{n_bytes / 1e6:.1f} MB"


def needed_bytes(sizes) -> int:
    return sum(-(-size // BLOCK) * BLOCK + BLOCK for size in sizes)  # + a block per directory entry


def tree_bytes(path: str | Path) -> int:
    """What a saved directory (or file) takes: the size the next save of it will need again."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def check_room(path: str | Path, needed: int, what: str) -> None:
    """StorageError before a write that cannot fit (the previous copy stays as it is)."""
    free = free_bytes(path)
    if free < needed:
        raise StorageError(f"cannot write {what} {path}: it needs {mb(needed)} and {mb(free)} is free there; nothing was written")


def is_storage_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def storage_error(path: str | Path, exc: OSError, what: str) -> StorageError:
    """The one line for a write that failed on the storage's side."""
    return StorageError(f"cannot write {what} {path}: {os.strerror(exc.errno)} ({mb(free_bytes(path))} free there)")

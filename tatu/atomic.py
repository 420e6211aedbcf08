"""Atomic file writes: a crash leaves the old file or the new one, never half of one."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def fsync_dir(path: str | Path) -> None:
    """A rename survives a power cut only once its directory is synced."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | Path, data: str | bytes, mode: int | None = None) -> None:
    """Write `data` to a temporary sibling, fsync it, rename it over `path`, sync the directory;
    a failure removes the temporary file.

    The file gets `mode`, by default the usual one (0666 less the umask), not mkstemp's private 0600."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask if mode is None else mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: str | Path, payload, sort_keys: bool = False) -> None:
    write_atomic(path, json.dumps(payload, indent=1, sort_keys=sort_keys, allow_nan=False) + "\n")


@contextmanager
def atomic_directory(out: str | Path, documents: dict[str, bytes] | None = None) -> Iterator[Path]:
    """A directory that appears complete or not at all: the block fills a temporary sibling
    (`documents` are written into it first, each fsynced), which is renamed to `out` when the
    block ends; an exception removes it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for name, data in (documents or {}).items():
            with open(tmp / name, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        yield tmp
        fsync_dir(tmp)  # its entries, before the rename publishes them
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(out.parent)

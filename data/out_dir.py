"""Where `tatu data build` writes: --out is replaced only when it holds a previous build (or
nothing); the build is written in a temporary sibling and renamed into place, and a failed build
removes what it created, the missing parents of --out included."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tatu.data.manifest import TOKENIZER_FILE, DataConfigError, DataError, load_manifest


def existing_manifest(out_dir: Path) -> dict | None:
    """The manifest of a previous build in `out_dir`, None when there is none."""
    try:
        return load_manifest(out_dir)
    except DataError:
        return None


def all_files_present(out_dir: Path, manifest: dict) -> bool:
    paths = [manifest.get("tokenizer", TOKENIZER_FILE)]
    for channel in manifest.get("channels", {}).values():
        paths += list(channel.get("files", {}).values())
    paths += [entry["file"] for entry in manifest.get("evals", {}).values()]
    paths += [entry["tags"]["file"] for entry in manifest.get("evals", {}).values() if "file" in entry.get("tags", {})]
    paths += [entry["file"] for entry in manifest.get("tasks", {}).values()]
    return all((out_dir / p).is_file() for p in paths)


def check_out_dir(out_dir: Path, inputs: list[str]) -> None:
    """Refuse an --out whose replacement would destroy anything but a previous build (exit 78)."""
    resolved = out_dir.resolve()
    for path in inputs:
        if resolved in Path(path).resolve().parents:
            raise DataConfigError(f"{out_dir}: holds the input {path}; refusing to replace it")
    if not out_dir.exists() and not out_dir.is_symlink():
        return
    if out_dir.is_dir():
        if existing_manifest(out_dir) is not None or not any(out_dir.iterdir()):
            return
    raise DataConfigError(f"{out_dir}: exists and is not a tatu data dir; refusing to replace it")


def replace_dir(work: Path, out_dir: Path) -> None:
    """Put the finished build in place; an old data dir is removed only after the rename."""
    old = None
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.rename(out_dir, old / "data")
    os.rename(work, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def make_parents(out_dir: Path) -> list[Path]:
    """Create the missing directories above `out_dir`; returns them deepest first, so a failed
    build can remove exactly what it created (and nothing that was there before)."""
    missing, ancestor = [], out_dir.parent
    while not ancestor.exists() and not ancestor.is_symlink():
        missing.append(ancestor)
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise DataConfigError(f"--out {out_dir}: {ancestor} is not a directory")
    try:
        for directory in reversed(missing):
            directory.mkdir()
    except OSError as exc:
        remove_dirs(missing)
        raise DataConfigError(f"--out {out_dir}: cannot create {exc.filename}: {exc.strerror}") from None
    return missing


def remove_dirs(created: list[Path]) -> None:
    for directory in created:  # deepest first; stops at one that is not empty
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            break


def work_dir(out_dir: Path, created: list) -> Path:
    """The build's temporary dir beside --out (renamed into place at the end), usual mode."""
    try:
        work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    except OSError as exc:
        remove_dirs(created)
        raise DataConfigError(f"--out {out_dir}: cannot write in {out_dir.parent} ({exc.strerror})") from None
    # mkdtemp makes the dir private (0700); the data dir gets the usual mode
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(work, 0o777 & ~umask)
    return work

"""A checkpoint directory's files, read without torch: which directory to read (a save that died
mid-swap leaves only `<ckpt>.old`), which directories of a run are checkpoints, the manifest, any one
file verified against it, and the metadata (`read_meta`: the run config, the step, what trained).

The sweep's coordinator, its cost estimate and the run report read a checkpoint's metadata here,
hashed against manifest.json as load_directory hashes every file, without loading the weights (or
torch: tests/test_imports.py keeps the coordinator torch-free)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

FORMAT = "tatu-ckpt-1"
MANIFEST = "manifest.json"
META = "meta.json"


class CheckpointError(ValueError):
    pass


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint directory to read: `path`, or `path.old` when a save died mid-swap."""
    path = Path(path)
    if path.exists():
        return path
    old = path.parent / f"{path.name}.old"
    if old.is_dir():
        return old
    raise CheckpointError(f"{path}: no such checkpoint")


def checkpoints_in(path: Path) -> list[Path]:
    """The checkpoint directories directly in `path` (a run's directory holds best/, final/ and its
    resume state/), as paths that work from wherever `path` was given."""
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.endswith(".old") and (p / MANIFEST).is_file())


def read_manifest(ckpt: Path) -> dict[str, str]:
    """The manifest's sha256 by file name; a missing, unreadable or foreign one is a CheckpointError
    that says what was given where a checkpoint goes."""
    if ckpt.is_dir() and not (ckpt / MANIFEST).exists():
        raise CheckpointError(f"{ckpt}: not a checkpoint ({ckpt / MANIFEST} is missing): a run's final/ or "
                              "best/ directory is one")
    try:
        manifest = json.loads((ckpt / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{ckpt / MANIFEST}: missing or invalid ({exc})") from exc
    found = manifest.get("format") if isinstance(manifest, dict) else None
    if found != FORMAT:
        # a data dir (tatu-data-1) or another tool's directory, given where a checkpoint goes
        raise CheckpointError(f"{ckpt}: not a checkpoint (its {MANIFEST} is {found!r}, a checkpoint's is "
                              f"{FORMAT!r}): a run's final/ or best/ directory is one")
    expected = manifest.get("files")
    if not isinstance(expected, dict):
        raise CheckpointError(f"{ckpt / MANIFEST}: invalid (no 'files' list of the checkpoint's files)")
    return expected


def read_verified(ckpt: Path, name: str, expected: dict[str, str]) -> bytes:
    """A file's bytes once they hash to what the manifest says (what is verified is what is used)."""
    file = ckpt / name
    if name not in expected:
        raise CheckpointError(f"{file}: not listed in {MANIFEST}")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{file}: missing or unreadable ({exc.strerror})") from exc
    if hashlib.sha256(data).hexdigest() != expected[name]:
        raise CheckpointError(f"{file}: sha256 mismatch with {MANIFEST} (corrupted or truncated)")
    return data


def read_document(ckpt: Path, name: str, expected: dict[str, str]) -> Any:
    """A JSON file of the checkpoint, verified, parsed."""
    data = read_verified(ckpt, name, expected)
    try:
        return json.loads(data)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise CheckpointError(f"{ckpt / name}: invalid JSON ({exc})") from exc


def read_meta(path: str | Path) -> dict:
    """A checkpoint's metadata (or its `.old` copy's after a save died mid-swap), verified against its
    manifest; CheckpointError (65) naming the file when it is missing, corrupted or not an object."""
    ckpt = resolve_checkpoint(path)
    meta = read_document(ckpt, META, read_manifest(ckpt))
    if not isinstance(meta, dict):
        raise CheckpointError(f"{ckpt / META}: not a JSON object")
    return meta

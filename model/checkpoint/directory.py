"""tatu's checkpoint directory, both ways: written atomically, read verified.

    <ckpt>/model.safetensors   weights (the tied lm_head is not stored twice)
    <ckpt>/config.json         GPTConfig
    <ckpt>/tokenizer.json      the tokenizer it was trained with
    <ckpt>/meta.json           metadata: run config, step, reference metrics, ...
    <ckpt>/<name>.safetensors  optional extra tensor groups (optimizer state, RNG states)
    <ckpt>/<name>.json         optional extra JSON documents (resume state)
    <ckpt>/manifest.json       sha256 of every file above

Writing goes to a temporary sibling directory, every file and the directory are fsynced, the
previous checkpoint is renamed aside, the new one renamed into place and the parent fsynced.
A crash at any moment leaves either the old or the new checkpoint complete: a loader that
finds only `<ckpt>.old` uses it. Loading hashes the bytes it then parses, so what is verified
is what is used. No pickle on this path.

A save is refused before anything is written when a floating tensor holds NaN or inf
(NonFiniteTensorError: such a state would poison every restart) or when the disk cannot
hold the new copy beside the old one (tatu.storage.StorageError, with the free space); a
write that fails mid-way on the storage's side removes its temp dir and raises the same.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load, save as st_save

from tatu.atomic import fsync_dir
from tatu.storage import check_room, is_storage_error, needed_bytes, storage_error
from tatu.model.checkpoint.contents import (Checkpoint, CheckpointError, check_vocab, model_state_for_saving,
                                            parse_config, parse_tokenizer)
from tatu.model.gpt import GPTConfig
from tatu.model.tokenizer import Tokenizer

FORMAT = "tatu-ckpt-1"
_RESERVED = {"model", "config", "tokenizer", "meta", "manifest"}


class NonFiniteTensorError(ValueError):
    """A save refused because a tensor holds NaN or inf: such a state would poison every restart."""


def non_finite_tensors(groups: dict[str, dict[str, torch.Tensor]]) -> list[str]:
    """'group/name' of every floating tensor with a NaN or an inf."""
    return [f"{group}/{name}" for group, tensors in groups.items() for name, t in tensors.items()
            if t.is_floating_point() and not bool(torch.isfinite(t).all())]


def save_checkpoint(
    path: str | Path,
    *,
    model: torch.nn.Module | None = None,
    model_state: dict[str, torch.Tensor] | None = None,
    model_config: GPTConfig,
    tokenizer: Tokenizer,
    meta: dict | None = None,
    extra_tensors: dict[str, dict[str, torch.Tensor]] | None = None,
    extra_json: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint directory atomically (see the module docstring)."""
    path = Path(path)
    if (model is None) == (model_state is None):
        raise ValueError("save_checkpoint: give exactly one of model= or model_state=")
    state = model_state_for_saving(model) if model is not None else model_state
    bad = non_finite_tensors({"model": state, **(extra_tensors or {})})
    if bad:
        raise NonFiniteTensorError(f"refusing to save {path}: {len(bad)} tensors are not finite ({', '.join(bad[:3])}...)")
    documents = _documents(state, model_config, tokenizer, meta or {}, extra_tensors or {}, extra_json or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    # Leftovers of saves killed mid-write (any pid): one writer per checkpoint path, so they are dead.
    for stale in path.parent.glob(f".{path.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    # The previous copy stays until the new one is complete: the disk must hold both at once.
    check_room(path, needed_bytes([len(d) for d in documents.values()] + [4096]), "checkpoint")
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    _write_complete(tmp, documents, path)
    _swap_into_place(tmp, path)
    return path


def _documents(state: dict[str, torch.Tensor], model_config: GPTConfig, tokenizer: Tokenizer, meta: dict,
               extra_tensors: dict[str, dict[str, torch.Tensor]], extra_json: dict[str, Any]) -> dict[str, bytes]:
    """Every file of the directory but the manifest, as the bytes that will be hashed and written."""
    documents: dict[str, bytes] = {
        "model.safetensors": st_save({k: v.contiguous() for k, v in state.items()}),
        "config.json": json.dumps(model_config.to_dict(), sort_keys=True).encode(),
        "tokenizer.json": tokenizer.to_json().encode("utf-8"),
        "meta.json": json.dumps(meta, sort_keys=True, allow_nan=False).encode(),
    }
    for name in [*extra_tensors, *extra_json]:
        if name in _RESERVED:
            raise ValueError(f"save_checkpoint: extra name {name!r} is reserved")
    for name, tensors in extra_tensors.items():
        documents[f"{name}.safetensors"] = st_save({k: v.detach().contiguous().cpu() for k, v in tensors.items()})
    for name, doc in extra_json.items():
        documents[f"{name}.json"] = json.dumps(doc, sort_keys=True, allow_nan=False).encode()
    return documents


def _write_file(path: Path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return hashlib.sha256(data).hexdigest()


def _write_complete(tmp: Path, documents: dict[str, bytes], path: Path) -> None:
    """`tmp` holding every document and the manifest of their hashes, fsynced; or nothing at all."""
    try:
        tmp.mkdir()
        hashes = {name: _write_file(tmp / name, data) for name, data in documents.items()}
        manifest = {"format": FORMAT, "files": hashes}
        _write_file(tmp / "manifest.json", json.dumps(manifest, sort_keys=True, indent=1).encode())
        fsync_dir(tmp)
    except OSError as exc:  # a full disk mid-write: no half-written copy stays on it
        shutil.rmtree(tmp, ignore_errors=True)
        if is_storage_error(exc):
            raise storage_error(path, exc, "checkpoint") from None
        raise


def _swap_into_place(tmp: Path, path: Path) -> None:
    """The complete `tmp` becomes `path`; at every moment `path` or `path.old` is a whole checkpoint."""
    old = path.parent / f"{path.name}.old"
    if old.exists():
        if path.exists():
            shutil.rmtree(old)
        else:  # a previous save died between the two renames: old is the only good copy
            old.rename(path)
    if path.exists():
        path.rename(old)
        fsync_dir(path.parent)
    tmp.rename(path)
    fsync_dir(path.parent)
    if old.exists():
        shutil.rmtree(old)


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
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.endswith(".old") and (p / "manifest.json").is_file())


def _read_verified(ckpt: Path, name: str, expected: dict[str, str]) -> bytes:
    file = ckpt / name
    if name not in expected:
        raise CheckpointError(f"{file}: not listed in manifest.json")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{file}: missing or unreadable ({exc.strerror})") from exc
    if hashlib.sha256(data).hexdigest() != expected[name]:
        raise CheckpointError(f"{file}: sha256 mismatch with manifest.json (corrupted or truncated)")
    return data


def load_directory(path: str | Path, map_location: str = "cpu") -> Checkpoint:
    """Read and verify a tatu checkpoint directory (or its `.old` copy after a save died mid-swap)."""
    ckpt = resolve_checkpoint(path)
    inside = checkpoints_in(ckpt) if ckpt.is_dir() and not (ckpt / "manifest.json").exists() else []
    if inside:
        raise CheckpointError(f"{ckpt}: not a checkpoint (no manifest.json) but a directory of them: {', '.join(map(str, inside))}")
    if ckpt.is_dir() and not (ckpt / "manifest.json").exists():
        raise CheckpointError(f"{ckpt}: not a checkpoint ({ckpt / 'manifest.json'} is missing): a run's final/ or "
                              "best/ directory is one")
    try:
        manifest = json.loads((ckpt / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{ckpt / 'manifest.json'}: missing or invalid ({exc})") from exc
    found = manifest.get("format") if isinstance(manifest, dict) else None
    if found != FORMAT:
        # a data dir (tatu-data-1) or another tool's directory, given where a checkpoint goes
        raise CheckpointError(f"{ckpt}: not a checkpoint (its manifest.json is {found!r}, a checkpoint's is "
                              f"{FORMAT!r}): a run's final/ or best/ directory is one")
    expected = manifest.get("files")
    if not isinstance(expected, dict):
        raise CheckpointError(f"{ckpt / 'manifest.json'}: invalid (no 'files' list of the checkpoint's files)")

    def tensors(name: str) -> dict[str, torch.Tensor]:
        data = _read_verified(ckpt, name, expected)
        try:
            loaded = st_load(data)
        except Exception as exc:  # safetensors raises its own error types
            raise CheckpointError(f"{ckpt / name}: unreadable safetensors ({exc})") from exc
        return {k: v.to(map_location) for k, v in loaded.items()}

    def document(name: str) -> Any:
        data = _read_verified(ckpt, name, expected)
        try:
            return json.loads(data)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise CheckpointError(f"{ckpt / name}: invalid JSON ({exc})") from exc

    extra_tensors, extra_json = {}, {}
    for name in expected:
        stem, _, ext = name.rpartition(".")
        if stem in _RESERVED:
            continue
        if ext == "safetensors":
            extra_tensors[stem] = tensors(name)
        elif ext == "json":
            extra_json[stem] = document(name)
    model_config = parse_config(document("config.json"), str(ckpt / "config.json"))
    tokenizer = parse_tokenizer(document("tokenizer.json"), str(ckpt / "tokenizer.json"))
    check_vocab(tokenizer, model_config, str(ckpt))
    return Checkpoint(
        path=ckpt,
        model_config=model_config,
        model_state=tensors("model.safetensors"),
        tokenizer=tokenizer,
        meta=document("meta.json"),
        extra_tensors=extra_tensors,
        extra_json=extra_json,
    )

"""The checkpoint format: a directory, verified on load, written atomically.

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
is what is used. No pickle on this path; legacy `.pt` files load with weights_only=True.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load, save as st_save

from tatu.atomic import fsync_dir
from tatu.storage import check_room, is_storage_error, needed_bytes, storage_error
from tatu.model.adapters import is_adapter_key, merge_state
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import Tokenizer, tokenizer_from_dict

FORMAT = "tatu-ckpt-1"
TIED_KEYS = ("lm_head.weight",)
_RESERVED = {"model", "config", "tokenizer", "meta", "manifest"}


class CheckpointError(ValueError):
    pass


class NonFiniteTensorError(ValueError):
    """A save refused because a tensor holds NaN or inf: such a state would poison every restart."""


def non_finite_tensors(groups: dict[str, dict[str, torch.Tensor]]) -> list[str]:
    """'group/name' of every floating tensor with a NaN or an inf."""
    return [f"{group}/{name}" for group, tensors in groups.items() for name, t in tensors.items()
            if t.is_floating_point() and not bool(torch.isfinite(t).all())]


@dataclass
class Checkpoint:
    path: Path
    model_config: GPTConfig
    model_state: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    meta: dict = field(default_factory=dict)
    extra_tensors: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    extra_json: dict[str, Any] = field(default_factory=dict)

    def build_model(self, device: str | torch.device = "cpu") -> GPT:
        """A plain GPT with these weights; a LoRA run's resume state (base + adapters) merged."""
        model = GPT(GPTConfig(**self.model_config.to_dict()))
        load_model_state(model, self.plain_state(), str(self.path))
        return model.to(device)

    def plain_state(self) -> dict[str, torch.Tensor]:
        if not any(is_adapter_key(k) for k in self.model_state):
            return self.model_state
        adapter = self.meta.get("adapter")
        if not isinstance(adapter, dict) or not isinstance(adapter.get("scaling"), (int, float)):
            raise CheckpointError(f"{self.path}: holds LoRA adapters but meta.json does not say their scaling")
        return merge_state(self.model_state, float(adapter["scaling"]))


def model_state_for_saving(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if k not in TIED_KEYS}


def load_model_state(model: GPT, state: dict[str, torch.Tensor], source: str) -> None:
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # torch reports tensors of the wrong shape ("size mismatch") this way
        raise CheckpointError(f"{source}: weights do not fit the model config ({_first_lines(exc)})") from exc
    missing = set(result.missing_keys) - set(TIED_KEYS)
    if missing or result.unexpected_keys:
        raise CheckpointError(
            f"{source}: weights do not fit the model config (missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(result.unexpected_keys)[:5]})"
        )


def _first_lines(exc: BaseException, n: int = 3) -> str:
    """torch's load_state_dict error spans one line per bad tensor; the first few name the problem."""
    return " ".join(str(exc).strip().splitlines()[:n])


def _parse_tokenizer(payload: Any, source: str) -> Tokenizer:
    if not isinstance(payload, dict):
        raise CheckpointError(f"{source}: tokenizer must be a JSON object, found {type(payload).__name__}")
    try:
        return tokenizer_from_dict(payload, source)
    except KeyError as exc:
        raise CheckpointError(f"{source}: tokenizer lacks the field {exc}") from exc
    except Exception as exc:  # TokenizerError, and HF tokenizers' own plain Exception on a bad "hf" body
        raise CheckpointError(f"{source}: unusable tokenizer ({exc})") from exc


def _parse_config(payload: Any, source: str) -> GPTConfig:
    if not isinstance(payload, dict):
        raise CheckpointError(f"{source}: model config must be a JSON object, found {type(payload).__name__}")
    try:
        return GPTConfig.from_dict(dict(payload))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{source}: model config does not fit tatu's GPT ({exc})") from exc


def _check_vocab(tokenizer: Tokenizer, config: GPTConfig, source: str) -> None:
    # Ids past the embedding would crash mid-run; ids never produced would make every score wrong.
    if tokenizer.vocab_size != config.vocab_size:
        raise CheckpointError(
            f"{source}: tokenizer has {tokenizer.vocab_size} tokens but the model config has "
            f"vocab_size {config.vocab_size}: they were not trained together"
        )


def _write_file(path: Path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return hashlib.sha256(data).hexdigest()


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
    documents: dict[str, bytes] = {
        "model.safetensors": st_save({k: v.contiguous() for k, v in state.items()}),
        "config.json": json.dumps(model_config.to_dict(), sort_keys=True).encode(),
        "tokenizer.json": tokenizer.to_json().encode("utf-8"),
        "meta.json": json.dumps(meta or {}, sort_keys=True, allow_nan=False).encode(),
    }
    for name, tensors in (extra_tensors or {}).items():
        if name in _RESERVED:
            raise ValueError(f"save_checkpoint: extra name {name!r} is reserved")
        documents[f"{name}.safetensors"] = st_save({k: v.detach().contiguous().cpu() for k, v in tensors.items()})
    for name, doc in (extra_json or {}).items():
        if name in _RESERVED:
            raise ValueError(f"save_checkpoint: extra name {name!r} is reserved")
        documents[f"{name}.json"] = json.dumps(doc, sort_keys=True, allow_nan=False).encode()

    path.parent.mkdir(parents=True, exist_ok=True)
    # Leftovers of saves killed mid-write (any pid): one writer per checkpoint path, so they are dead.
    for stale in path.parent.glob(f".{path.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    # The previous copy stays until the new one is complete: the disk must hold both at once.
    check_room(path, needed_bytes([len(d) for d in documents.values()] + [4096]), "checkpoint")
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
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
    return path


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint directory to read: `path`, or `path.old` when a save died mid-swap."""
    path = Path(path)
    if path.exists():
        return path
    old = path.parent / f"{path.name}.old"
    if old.is_dir():
        return old
    raise CheckpointError(f"{path}: no such checkpoint")


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


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> Checkpoint:
    """Load and verify a checkpoint directory, or a legacy single-file .pt checkpoint."""
    path = Path(path)
    if path.is_file():
        return load_legacy_pt(path)
    from tatu.model.hf import is_hf_dir, load_hf_dir

    if is_hf_dir(path):  # a transformers GPT-2 directory: no manifest, config.json says gpt2
        return load_hf_dir(path)
    ckpt = resolve_checkpoint(path)
    try:
        manifest = json.loads((ckpt / "manifest.json").read_text())
        expected = manifest["files"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{ckpt / 'manifest.json'}: missing or invalid ({exc})") from exc
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{ckpt / 'manifest.json'}: unknown format {manifest.get('format')!r}")

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
    model_config = _parse_config(document("config.json"), str(ckpt / "config.json"))
    tokenizer = _parse_tokenizer(document("tokenizer.json"), str(ckpt / "tokenizer.json"))
    _check_vocab(tokenizer, model_config, str(ckpt))
    return Checkpoint(
        path=ckpt,
        model_config=model_config,
        model_state=tensors("model.safetensors"),
        tokenizer=tokenizer,
        meta=document("meta.json"),
        extra_tensors=extra_tensors,
        extra_json=extra_json,
    )


_LEGACY_STATE_KEYS = ("model", "model_state", "state_dict")
_LEGACY_CONFIG_KEYS = ("config", "model_args", "model_config")


def load_legacy_pt(path: Path) -> Checkpoint:
    """The operator's single-file checkpoints (`torch.save({"model": ..., "config": ...})`).

    The tokenizer comes from the file itself (a "tokenizer" dict) or from tokenizer.json beside it.
    """
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"{path}: not a loadable weights-only torch checkpoint ({exc})") from exc
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: expected a dict, found {type(payload).__name__}")
    state = next((payload[k] for k in _LEGACY_STATE_KEYS if k in payload), None)
    config = next((payload[k] for k in _LEGACY_CONFIG_KEYS if k in payload), None)
    if state is None or config is None:
        raise CheckpointError(f"{path}: needs a model state ({'/'.join(_LEGACY_STATE_KEYS)}) and a config ({'/'.join(_LEGACY_CONFIG_KEYS)})")
    # torch.compile prefixes parameter names; the weights are the same.
    state = {k.removeprefix("_orig_mod."): v for k, v in state.items()}
    state = {k: v for k, v in state.items() if k not in TIED_KEYS}
    beside = path.parent / "tokenizer.json"
    if isinstance(payload.get("tokenizer"), dict):
        tokenizer = _parse_tokenizer(payload["tokenizer"], f"{path}[tokenizer]")
    elif beside.exists():
        try:
            tokenizer_payload = json.loads(beside.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{beside}: cannot read the tokenizer of {path} ({exc})") from exc
        tokenizer = _parse_tokenizer(tokenizer_payload, str(beside))
    else:
        raise CheckpointError(f"{path}: no tokenizer inside and no tokenizer.json beside it")
    meta = payload.get("meta", {})
    model_config = _parse_config(config, str(path))
    _check_vocab(tokenizer, model_config, str(path))
    return Checkpoint(path=path, model_config=model_config, model_state=state, tokenizer=tokenizer, meta=dict(meta))

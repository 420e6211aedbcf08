"""load_checkpoint: whichever format a path holds, as one Checkpoint.

A file is a legacy single-file `.pt` (read weights-only: no pickle runs); a directory one of the
handed `formats` recognises is theirs (tatu.model.hf hands GPT2_DIRECTORY); any other directory
is tatu's own, read verified (tatu.model.checkpoint.directory)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch

from tatu.model.checkpoint.contents import (TIED_KEYS, Checkpoint, CheckpointError, DirectoryFormat, check_vocab,
                                            parse_config, parse_tokenizer)
from tatu.model.checkpoint.directory import load_directory


def load_checkpoint(path: str | Path, map_location: str = "cpu", formats: Sequence[DirectoryFormat] = ()) -> Checkpoint:
    """Load and verify a checkpoint directory, a legacy single-file .pt checkpoint, or a
    directory one of `formats` recognises."""
    path = Path(path)
    if path.is_file():
        return load_legacy_pt(path)
    for directory_format in formats:
        if directory_format.recognises(path):
            return directory_format.load(path)
    return load_directory(path, map_location)


_LEGACY_STATE_KEYS = ("model", "model_state", "state_dict")
_LEGACY_CONFIG_KEYS = ("config", "model_args", "model_config")
# What torch.save writes first: a zip archive (torch >= 1.6) or a pickle (older torch).
_TORCH_FILE_STARTS = (b"PK\x03\x04", b"\x80")
# What a checkpoint is, said wherever a path is not one.
CHECKPOINT_IS = "a checkpoint is a directory holding manifest.json (a run's final/ or best/) or a .pt file torch.save wrote"


def _torch_reason(exc: Exception) -> str:
    """torch.load's own reason in one line: its message without the paragraphs around it (one of
    which advises weights_only=False, which would let the file run code)."""
    boilerplate = ("Weights only load failed", "Please file an issue", "Check the documentation")
    lines = [line.strip() for line in str(exc).splitlines()]
    kept = [line.removeprefix("WeightsUnpickler error:").strip() for line in lines
            if line and not line.startswith(boilerplate)]
    kept = [line for line in kept if line]
    return kept[0] if kept else type(exc).__name__


def load_legacy_pt(path: Path) -> Checkpoint:
    """The operator's single-file checkpoints (`torch.save({"model": ..., "config": ...})`).

    The tokenizer comes from the file itself (a "tokenizer" dict) or from tokenizer.json beside it.
    """
    try:
        with open(path, "rb") as f:
            start = f.read(4)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror})") from exc
    if not start.startswith(_TORCH_FILE_STARTS):  # tokenizer.json, a log: torch would say so in 7 lines
        what = "an empty file" if not start else "a JSON file" if start.lstrip()[:1] in (b"{", b"[") else "not a torch file"
        raise CheckpointError(f"{path}: not a checkpoint ({what}); {CHECKPOINT_IS}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"{path}: not a loadable weights-only torch checkpoint ({_torch_reason(exc)})") from exc
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
        tokenizer = parse_tokenizer(payload["tokenizer"], f"{path}[tokenizer]")
    elif beside.exists():
        try:
            tokenizer_payload = json.loads(beside.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{beside}: cannot read the tokenizer of {path} ({exc})") from exc
        tokenizer = parse_tokenizer(tokenizer_payload, str(beside))
    else:
        raise CheckpointError(f"{path}: no tokenizer inside and no tokenizer.json beside it")
    meta = payload.get("meta", {})
    model_config = parse_config(config, str(path))
    check_vocab(tokenizer, model_config, str(path))
    return Checkpoint(path=path, model_config=model_config, model_state=state, tokenizer=tokenizer, meta=dict(meta))

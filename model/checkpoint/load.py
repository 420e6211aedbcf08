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

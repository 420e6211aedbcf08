"""The data dir's manifest, read in one place, and the data layer's two exceptions.

DataError: the data itself is bad (a file, a line, the manifest) -> exit 65 at the entry point.
DataConfigError: the data is fine but does not fit what was asked of it (another tokenizer,
a mix channel it lacks, a saved position for other sizes) -> exit 78.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FORMAT = "tatu-data-1"
MANIFEST = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"


def token_dtype(vocab_size: int) -> np.dtype:
    """What a token file holds: raw little-endian uint16 up to 65535 ids, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 65535 else np.dtype(np.uint32)


def chars_per_token_ratio(chars: int, tokens: int) -> float | None:
    """A source's `chars_per_token` in the manifest."""
    return round(chars / tokens, 6) if tokens else None


class DataError(ValueError):
    pass


class DataConfigError(DataError):
    pass


def load_manifest(data_dir: str | Path) -> dict:
    """The manifest of a built data dir, checked for its format."""
    path = Path(data_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: no manifest (run `tatu data build` first)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: unreadable manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise DataError(f"{path}: format {found!r}, expected {FORMAT!r}")
    return manifest


def check_tokenizer(manifest: dict, data_dir: str | Path, tokenizer_hash: str, model: str = "the model") -> None:
    """The data's ids mean something only with the tokenizer they were built with."""
    built_with = str(manifest.get("tokenizer_hash"))
    if built_with != tokenizer_hash:
        raise DataConfigError(f"tokenizer mismatch: data {data_dir} was built with {built_with[:12]}, "
                              f"{model} uses {tokenizer_hash[:12]}: rebuild the data with its tokenizer")

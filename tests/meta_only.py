"""A checkpoint directory holding only its metadata and a manifest that lists it: what the readers
of a checkpoint's metadata (tatu.model.checkpoint.files.read_meta) verify, without weights to build."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tatu.model.checkpoint.files import FORMAT, MANIFEST, META


def write_meta(ckpt: Path, meta: dict) -> Path:
    ckpt.mkdir(parents=True, exist_ok=True)
    data = json.dumps(meta, sort_keys=True).encode()
    (ckpt / META).write_bytes(data)
    (ckpt / MANIFEST).write_text(json.dumps({"format": FORMAT, "files": {META: hashlib.sha256(data).hexdigest()}}))
    return ckpt

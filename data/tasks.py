"""Multiple-choice tasks in the data dir: `tatu data build --task NAME=FILE` checks each file
(item_problem: the one item rule, also what tatu.evals.choice reads) and copies it
verbatim to tasks/<NAME>.jsonl, hashed in the manifest; a bad line is FILE:LINE and exit 65."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tatu.data.manifest import DataError


def item_problem(payload) -> str | None:
    """Why a parsed JSONL line is not an item {"context", "choices", "answer"} (None when it is)."""
    if not isinstance(payload, dict):
        return "expected an object with context, choices, answer"
    context, choices, answer = payload.get("context"), payload.get("choices"), payload.get("answer")
    if not isinstance(context, str) or not context.strip():
        return "'context' must be a non-empty string"
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c.strip() for c in choices):
        return "'choices' must be a list of at least 2 non-empty strings"
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
        return f"'answer' must be the index of a choice (0..{len(choices) - 1})"
    return None


def read_items(path: str | Path, sha256: str | None = None) -> list[tuple[int, dict]]:
    """(line, item) of every non-blank line; DataError "FILE:LINE: reason" at the first bad one.
    With `sha256` (the manifest's), the bytes read are checked against it first."""
    return _items(Path(path), _verified_bytes(Path(path), sha256, "was edited after `tatu data build`"))


def _verified_bytes(path: Path, sha256: str | None, changed: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read the task ({exc})") from None
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise DataError(f"{path}: its sha256 is not the manifest's: the task {changed}")
    return data


def _items(path: Path, data: bytes) -> list[tuple[int, dict]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: cannot read the task ({exc})") from None
    items = []
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            payload = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: not JSON ({exc.msg})") from None
        problem = item_problem(payload)
        if problem:
            raise DataError(f"{path}:{number}: {problem}")
        items.append((number, payload))
    if not items:
        raise DataError(f"{path}: no items")
    return items


def copy_tasks(tasks: dict[str, str], work: Path, hashes: dict[str, str]) -> dict:
    out = {}
    if tasks:
        (work / "tasks").mkdir()
    for name, path in tasks.items():
        # the bytes hashed for the manifest are the bytes checked and the bytes copied
        data = _verified_bytes(Path(path), hashes[path], "changed while `tatu data build` read it")
        n_items = len(_items(Path(path), data))
        rel = f"tasks/{name}.jsonl"
        (work / rel).write_bytes(data)
        out[name] = {"file": rel, "items": n_items, "sha256": hashes[path], "source": str(Path(path).resolve())}
    return out

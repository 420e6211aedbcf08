"""Eval sets in the data dir: verbatim copies, every line checked (a pair against --seq-len; the
checkable answers on every pair or on none, data/answers.py), and the tags of what each line scores
(data/tags.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

from tatu.data.answers import answer_items
from tatu.data.documents import is_jsonl, read_text_documents
from tatu.data.manifest import DataError
from tatu.data.sft import BadLine, read_sft_file
from tatu.data.sft_shards import encode_within
from tatu.data.tags import write_tags
from tatu.model.tokenizer import Tokenizer


def copy_eval(name: str, path: str, tok: Tokenizer, seq_len: int | None, work: Path, hashes: dict[str, str],
              chars_per_token: int) -> dict:
    """Copy an eval set verbatim; any bad line is an error (skipping would change what is scored)."""
    pairs = is_jsonl(path)
    scored: list[tuple[int, str]] = []  # (line, the text an eval scores): what is tagged
    n_answers = 0
    if pairs:
        examples = []
        for item in read_sft_file(path):
            if isinstance(item, BadLine):
                raise DataError(str(item))
            encoded = encode_within(item, tok, seq_len, chars_per_token)
            if isinstance(encoded, BadLine):
                raise DataError(str(encoded))
            scored.append((item.line, item.scored_text))
            examples.append(item)
        try:
            n_answers = len(answer_items(examples, path))
        except ValueError as exc:
            raise DataError(str(exc)) from None
    else:
        for item in read_text_documents(path, one_per_line=True):
            if isinstance(item, BadLine):
                raise DataError(str(item))
            scored.append((item.line, item.text))
    if not scored:
        raise DataError(f"{path}: eval set {name!r} has no lines to score")
    rel = f"evals/{name}.{'jsonl' if pairs else 'txt'}"
    shutil.copyfile(path, work / rel)
    entry = {"file": rel, "kind": "pairs" if pairs else "text", "lines": len(scored), "sha256": hashes[path],
             "source": str(Path(path).resolve()), "tags": write_tags(name, scored, work)}
    if n_answers:  # a set without answers has no exact-match metric: the key is absent, never 0
        entry["answers"] = n_answers
    return entry

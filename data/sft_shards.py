"""An SFT channel's files: every pair's ids, its loss mask (1 where the id is a target) and the
offsets of the pairs; a pair longer than one row of --seq-len is a bad line, found by its
characters alone where they rule it out (a huge line costs a length check, not a tokenization)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

from tatu.data.bad_lines import BadLines
from tatu.data.manifest import DataError, chars_per_token_ratio
from tatu.data.sft import BadLine, SFTExample, file_lines, parse_sft_line
from tatu.model.tokenizer import Tokenizer


def max_chars_per_token(tok: Tokenizer) -> int:
    """The most characters one token decodes to (a partial UTF-8 byte counts as one)."""
    specials = tok.special_ids
    return max([1] + [len(tok.decode([i])) for i in range(tok.vocab_size) if i not in specials])


def _check_length(example: SFTExample, n_ids: int, seq_len: int | None) -> BadLine | None:
    if seq_len is not None and n_ids > seq_len + 1:
        return BadLine(example.path, example.line,
                       f"pair is {n_ids} tokens, longer than --seq-len {seq_len} allows ({seq_len + 1} per row)")
    return None


def encode_within(example: SFTExample, tok: Tokenizer, seq_len: int | None,
                  chars_per_token: int) -> tuple[list[int], list[bool]] | BadLine:
    """(ids, is_target), or the BadLine of a pair longer than the context. A pair whose
    characters alone rule it out is refused without being tokenized, so one huge line costs
    a length check, not minutes and gigabytes."""
    if seq_len is not None:
        at_least = example.min_ids(chars_per_token)
        if at_least > seq_len + 1:
            return BadLine(example.path, example.line,
                           f"pair is at least {at_least} tokens ({example.n_chars} characters), longer than "
                           f"--seq-len {seq_len} allows ({seq_len + 1} per row)")
    ids, is_target = example.encode(tok)
    too_long = _check_length(example, len(ids), seq_len)
    return (ids, is_target) if too_long is None else too_long


def write_sft_channel(name: str, paths: list[str], tok: Tokenizer, dtype: np.dtype, work: Path,
                      hashes: dict[str, str], bad: BadLines, seq_len: int | None,
                      progress: Callable[[int], None], chars_per_token: int) -> dict:
    """Write channel `name`'s files under `work`; its manifest entry (`chars_per_token`:
    max_chars_per_token(tok), computed once per build)."""
    (work / name).mkdir()
    files = {"ids": f"{name}/ids.bin", "mask": f"{name}/mask.bin", "offsets": f"{name}/offsets.npy"}
    special = np.array(sorted(tok.special_ids))
    offsets, sources = [0], []
    total_targets = max_pair = 0
    with open(work / files["ids"], "wb") as ids_file, open(work / files["mask"], "wb") as mask_file:
        for path in paths:
            n_pairs = n_tokens = n_chars = n_targets = 0
            for number, raw in file_lines(path):
                progress(len(raw) + 1)
                item = parse_sft_line(raw, path, number)
                if isinstance(item, BadLine):
                    bad.handle(item)
                    continue
                encoded = encode_within(item, tok, seq_len, chars_per_token)
                if isinstance(encoded, BadLine):
                    bad.handle(encoded)
                    continue
                ids, is_target = encoded
                ids_array = np.asarray(ids, dtype=dtype)
                ids_array.tofile(ids_file)
                np.asarray(is_target, dtype=np.uint8).tofile(mask_file)
                offsets.append(offsets[-1] + len(ids))
                n_pairs += 1
                n_tokens += int((~np.isin(ids_array, special)).sum())
                n_chars += item.n_chars
                n_targets += sum(is_target)
                max_pair = max(max_pair, len(ids))
            sources.append({"path": str(Path(path).resolve()), "sha256": hashes[path], "bytes": os.path.getsize(path),
                            "pairs": n_pairs, "tokens": n_tokens, "chars": n_chars,
                            "chars_per_token": chars_per_token_ratio(n_chars, n_tokens), "targets": n_targets})
            total_targets += n_targets
    if len(offsets) == 1:
        raise DataError(f"channel {name!r}: no valid pairs in {', '.join(paths)}")
    np.save(work / files["offsets"], np.asarray(offsets, dtype=np.int64))
    return {"kind": "sft", "sources": sources, "files": files, "dtype": dtype.name,
            "pairs": len(offsets) - 1, "max_pair_tokens": max_pair, "tokens": offsets[-1],
            "targets": total_targets, "skipped_lines": bad.record()}

"""The documents of a text channel's source, read a line at a time (memory flat in the file's size).

Plain text: blocks separated by blank lines, or one document per line (`one_per_line`). JSONL:
{"text": ...} per line, or pairs (their whole text, and the pair itself: a text channel writes it
in the chat layout, a tokenizer trains on the text). A bad line is a BadLine (FILE:LINE: reason);
the caller decides whether it stops the build. The same parsers read a whole file
(`read_documents`) or one part of it that starts at a known line (`documents_in`, what the data
build's chunks use): only where the lines come from differs. `plain_texts` gives the texts of
such a part of a plain-text source at C speed (whole-string operations, not a loop over lines).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from tatu.data.manifest import DataError
from tatu.data.sft import BadLine, SFTExample, file_lines, parse_sft_line, split_lines

Lines = Iterable[tuple[int, bytes]]
# one or more blank lines (empty, or whitespace as str.strip sees it: \s is the same set) between
# two lines of text, in a text with a "\n" added at each end: the greedy \s* backs up to the last
# "\n" of the run, so the next line's leading whitespace stays with it
_BLANK_LINES = re.compile(r"\n\s*\n")


def is_jsonl(path: str | Path) -> bool:
    return str(path).endswith(".jsonl")


@dataclass(frozen=True)
class Document:
    line: int  # 1-based line where the document starts
    text: str
    n_bytes: int  # bytes of the source it came from (for the progress bar)
    pair: SFTExample | None = None  # a JSONL pair: a text channel lays it out as chat (markers, EOS)


def text_documents(lines: Lines, path: str, one_per_line: bool = False) -> Iterator[Document | BadLine]:
    """A block keeps its lines joined by "\\n" exactly as written (only the line ending is
    dropped), so a shard decodes back to the source text."""
    block: list[str] = []
    block_start, block_bytes = 0, 0
    for number, raw in lines:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield BadLine(path, number, f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")
            continue
        blank = not text.strip()
        if one_per_line:
            if not blank:
                yield Document(number, text, len(raw) + 1)
            continue
        if blank:
            if block:
                yield Document(block_start, "\n".join(block), block_bytes)
            block, block_bytes = [], 0
            continue
        if not block:
            block_start = number
        block.append(text)
        block_bytes += len(raw) + 1
    if block:
        yield Document(block_start, "\n".join(block), block_bytes)


def jsonl_documents(lines: Lines, path: str) -> Iterator[Document | BadLine]:
    for number, raw in lines:
        try:
            payload = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            payload = None
        if isinstance(payload, dict) and "text" in payload:
            text = payload["text"]
            if not isinstance(text, str) or not text.strip():
                yield BadLine(path, number, "field 'text' is not a non-empty string")
            else:
                yield Document(number, text, len(raw) + 1)
            continue
        parsed = parse_sft_line(raw, path, number)
        if isinstance(parsed, BadLine):
            yield parsed
        else:
            yield Document(number, parsed.text, len(raw) + 1, parsed)


def _documents(lines: Lines, path: str, one_per_line: bool) -> Iterator[Document | BadLine]:
    return jsonl_documents(lines, path) if is_jsonl(path) else text_documents(lines, path, one_per_line)


def read_documents(path: str | Path, one_per_line: bool = False) -> Iterator[Document | BadLine]:
    """Every document of a source file, streamed."""
    return _documents(file_lines(path), str(path), one_per_line)


def read_text_documents(path: str | Path, one_per_line: bool = False) -> Iterator[Document | BadLine]:
    return text_documents(file_lines(path), str(path), one_per_line)


def documents_in(data: bytes, path: str, first_line: int, one_per_line: bool = False) -> Iterator[Document | BadLine]:
    """The documents of `data`, a part of `path` that starts at line `first_line` and ends at a
    document boundary (text_shards.chunks cuts it so)."""
    return _documents(split_lines(data, first_line), path, one_per_line)


def plain_texts(data: bytes, one_per_line: bool = False) -> list[str] | None:
    """The texts text_documents finds in `data` (a plain-text source, or a part of one that ends
    at a document boundary); None when `data` is not UTF-8: the line reader then names the line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\r" in text:  # the one CR before a line's LF (or the file's end) is part of its line ending
        text = text.replace("\r\n", "\n")
        text = text[:-1] if text.endswith("\r") else text
    if one_per_line:
        return [line for line in text.split("\n") if line and not line.isspace()]
    blocks = _BLANK_LINES.split(f"\n{text}\n")
    blocks[0] = blocks[0][1:]
    blocks[-1] = blocks[-1][:-1]
    return [block for block in blocks if block]


def training_texts(paths: Iterable[str | Path], one_per_line: bool = False,
                   progress: Callable[[int], None] | None = None) -> Iterator[str]:
    """The texts a tokenizer is trained on, streamed; any bad line stops with FILE:LINE (exit 65).
    `progress` is told the source bytes of every document read."""
    for path in paths:
        for item in read_documents(path, one_per_line):
            if isinstance(item, BadLine):
                raise DataError(str(item))
            if progress is not None:
                progress(item.n_bytes)
            yield item.text

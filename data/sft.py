"""Reading SFT JSONL: one instruction pair per line, validated, with the line number kept.

Two forms per line:
    {"prompt": "...", "response": "..."}
    {"messages": [{"role": "user"|"system"|"assistant", "content": "..."}, ...]}
A prompt/response line may carry a checkable answer, `"answer": "..."` (data/answers.py): what the
greedy response must equal, once normalised, for the pair to count as answered right.

Every problem is reported as `FILE:LINE: reason` (BadLine), so an operator can open the file
at the line. Nothing here decides whether a bad line stops the build or is skipped: the
caller (data/bad_lines.py, for `tatu data build`) does, and the build always counts what it skipped.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tatu.data.answers import ANSWER_FIELD, answer_problem
from tatu.model.chat import ROLES, encode_messages, encode_pair
from tatu.model.tokenizer import Tokenizer


@dataclass(frozen=True)
class BadLine:
    path: str
    line: int  # 1-based
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass(frozen=True)
class SFTExample:
    path: str
    line: int  # 1-based
    prompt: str | None = None
    response: str | None = None
    messages: tuple[dict, ...] | None = None
    answer: str | None = None  # the checkable answer of a prompt/response pair (None: not marked)

    def encode(self, tok: Tokenizer) -> tuple[list[int], list[bool]]:
        """(ids, is_target) in the one layout shared with training, scoring and generation."""
        if self.messages is not None:
            return encode_messages(tok, list(self.messages))
        return encode_pair(tok, self.prompt, self.response)

    @property
    def text(self) -> str:
        """All the text the example encodes (what a tokenizer is trained on)."""
        if self.messages is not None:
            return "\n".join(m["content"] for m in self.messages)
        return f"{self.prompt}\n{self.response}"

    @property
    def scored_text(self) -> str:
        """The text an eval scores: the response (for messages, the assistant turns concatenated)."""
        if self.messages is not None:
            return "".join(m["content"] for m in self.messages if m["role"] == "assistant")
        return self.response

    def min_ids(self, max_chars_per_token: int) -> int:
        """A lower bound of len(self.encode(tok)) from character counts alone, where no token of
        `tok` stands for more than `max_chars_per_token` characters: what lets a huge line be
        refused before tokenizing it costs time and memory. Specials are counted exactly."""
        if self.messages is not None:
            pieces, specials = [m["content"] for m in self.messages], 1 + len(self.messages)
        else:
            pieces, specials = [self.prompt, self.response], 4  # BOS <|user|> <|assistant|> EOS
        return specials + sum(-(-len(piece) // max_chars_per_token) for piece in pieces)

    @property
    def n_chars(self) -> int:
        if self.messages is not None:
            return sum(len(m["content"]) for m in self.messages)
        return len(self.prompt) + len(self.response)


class _Invalid(ValueError):
    """A reason a decoded line is not a pair; becomes a BadLine with the file and line."""


def _nonempty_string(payload: dict, field: str, where: str = "") -> str:
    if field not in payload:
        raise _Invalid(f"missing field {field!r}{where}")
    value = payload[field]
    if not isinstance(value, str):
        raise _Invalid(f"field {field!r}{where} is {type(value).__name__}, expected a string")
    if not value.strip():
        raise _Invalid(f"empty {field!r}{where}")
    return value


def _answer(payload: dict) -> str | None:
    if ANSWER_FIELD not in payload:
        return None
    problem = answer_problem(payload[ANSWER_FIELD])
    if problem:
        raise _Invalid(problem)
    return payload[ANSWER_FIELD]


def _validate_messages(messages) -> tuple[dict, ...]:
    if not isinstance(messages, list) or not messages:
        raise _Invalid("'messages' must be a non-empty list")
    cleaned = []
    for i, message in enumerate(messages):
        where = f" in messages[{i}]"
        if not isinstance(message, dict):
            raise _Invalid(f"messages[{i}] is {type(message).__name__}, expected an object")
        role = message.get("role")
        if role is None:
            raise _Invalid(f"missing field 'role'{where}")
        if role not in ROLES:
            raise _Invalid(f"unknown role {role!r}{where} (expected one of {', '.join(ROLES)})")
        cleaned.append({"role": role, "content": _nonempty_string(message, "content", where)})
    if not any(m["role"] == "assistant" for m in cleaned):
        raise _Invalid("no 'assistant' message: nothing to train on")
    if cleaned[0]["role"] == "assistant":
        raise _Invalid("messages start with 'assistant': there is no prompt")
    return tuple(cleaned)


def parse_sft_line(raw: bytes, path: str, line: int) -> SFTExample | BadLine:
    """One raw JSONL line (without its newline) -> an example, or the reason it is bad."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BadLine(path, line, f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")
    if not text.strip():
        return BadLine(path, line, "empty line")
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        return BadLine(path, line, f"not valid JSON ({exc.msg} at column {exc.colno})")
    if not isinstance(payload, dict):
        return BadLine(path, line, f"expected a JSON object, got {type(payload).__name__}")
    try:
        if "messages" in payload:
            if ANSWER_FIELD in payload:
                raise _Invalid(f"field {ANSWER_FIELD!r} needs a prompt/response pair: a 'messages' line has no one "
                               f"prompt to generate the answer from")
            return SFTExample(path, line, messages=_validate_messages(payload["messages"]))
        return SFTExample(path, line, prompt=_nonempty_string(payload, "prompt"),
                          response=_nonempty_string(payload, "response"), answer=_answer(payload))
    except _Invalid as exc:
        return BadLine(path, line, str(exc))


def split_lines(data: bytes, first_line: int = 1) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without its newline); a final newline opens no extra line.
    `data` may be a part of a file that starts at line `first_line`."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, raw in enumerate(lines, start=first_line):
        yield number, raw[:-1] if raw.endswith(b"\r") else raw


def file_lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """split_lines of a whole file, read a line at a time: memory stays flat in the file's size.
    (Binary reads split at b"\n" only, as split_lines does.)"""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            yield number, raw[:-1] if raw.endswith(b"\r") else raw


def read_sft_file(path: str | Path) -> Iterator[SFTExample | BadLine]:
    """Every line of a JSONL file, in order, as an example or a BadLine."""
    path = str(path)
    for number, raw in file_lines(path):
        yield parse_sft_line(raw, path, number)

"""The demo's Debian texts as documents: decoding (UTF-8, else the package's legacy encoding),
man-page overstrike, focalinux paragraphs, fortunes and pydoc topics (tatu.data.demo.sources uses them)."""
from __future__ import annotations

import re
import textwrap
import unicodedata
from dataclasses import dataclass


@dataclass
class SourceText:
    """One package file's documents, and how many of its lines could not be decoded."""
    package: str
    version: str
    path: str
    documents: list[str]
    dropped_lines: int


def decode_lines(raw: bytes, fallback: str) -> tuple[list[str], int]:
    """Lines decoded as UTF-8, else as `fallback`; lines with control characters are dropped.

    Returns (lines, number dropped). Backspace overstriking (fortune's bold/underline) is
    removed first, since it is formatting, not text.
    """
    lines, dropped = [], 0
    for raw_line in raw.split(b"\n"):
        raw_line = _strip_overstrike(raw_line.rstrip(b"\r"))
        try:
            line = raw_line.decode("utf-8")
        except UnicodeDecodeError:
            try:
                line = raw_line.decode(fallback)
            except UnicodeDecodeError:
                dropped += 1
                continue
        line = line.expandtabs(8).rstrip()
        if any(unicodedata.category(ch) == "Cc" for ch in line):
            dropped += 1
            continue
        lines.append(line)
    return lines, dropped


def _strip_overstrike(raw_line: bytes) -> bytes:
    # "___\b\b\bonly" underlines "only": each backspace cancels the character before it
    while b"\x08" in raw_line:
        shorter = re.sub(rb"[^\x08]\x08", b"", raw_line)
        if shorter == raw_line:
            break  # a backspace at the start of a line: left for the control check
        raw_line = shorter
    return raw_line


def _blocks(lines: list[str]) -> list[list[str]]:
    """Runs of non-blank lines."""
    blocks, current = [], []
    for line in lines:
        if line.strip():
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def _letters_share(text: str) -> float:
    visible = [ch for ch in text if not ch.isspace()]
    return sum(ch.isalpha() for ch in visible) / max(1, len(visible))


def focalinux_documents(lines: list[str]) -> list[str]:
    """Prose paragraphs of the Foca GNU/Linux guide, each joined into one line.

    Prose is indented exactly five columns; code, configuration files and shell sessions
    sit at column 0 or deeper, and headings are underlined: both are left out.
    """
    documents = []
    for block in _blocks(lines):
        if not re.match(r" {5}\S", block[0]) or not all(re.match(r" {5,}\S", ln) for ln in block):
            continue
        text = " ".join(" ".join(block).split())
        text = re.sub(r"`([^`']*)'", r"\1", text)  # `comando' quoting
        text = re.sub(r"(?<!\w)_(\S(?:[^_]*\S)?)_(?!\w)", r"\1", text)  # _ênfase_
        # the tables of contents are lists of section numbers ("20.1.2. Instalar pacotes")
        if len(re.findall(r"\d+\.\d+\.", text)) >= 3:
            continue
        if len(text) >= 20 and _letters_share(text) >= 0.7:
            documents.append(text)
    return documents


def faq_documents(lines: list[str]) -> list[str]:
    """Prose paragraphs of the Debian FAQ's text version: blocks indented exactly four columns
    (deeper ones are lists, commands and examples; column 0 holds the headings)."""
    documents = []
    for block in _blocks([ln.replace("\xa0", " ") for ln in lines]):  # the text wraps at no-break spaces too
        if not all(re.match(r" {4}\S", ln) for ln in block):
            continue
        text = " ".join(" ".join(block).split())
        if len(re.findall(r"\d+\.\d+\.", text)) >= 3:  # tables of contents
            continue
        if len(text) >= 20 and _letters_share(text) >= 0.7:
            documents.append(text)
    return documents


def fortune_documents(lines: list[str]) -> list[str]:
    """Fortunes ('%'-separated), keeping their line breaks but no blank lines inside."""
    documents, current = [], []
    for line in [*lines, "%"]:
        if line.strip() == "%":
            text = textwrap.dedent("\n".join(ln for ln in current if ln.strip()))
            if len(text) >= 20 and _letters_share(text) >= 0.6:
                documents.append(text)
            current = []
        else:
            current.append(line)
    return documents


def pydoc_documents(topics: dict[str, str]) -> list[str]:
    """Prose paragraphs of Python's own reference text (pydoc_data.topics)."""
    documents = []
    for name in sorted(topics):
        for block in _blocks(topics[name].splitlines()):
            # indented blocks are code or grammar; underlines mark headings
            if any(ln[0].isspace() or re.fullmatch(r"[*=\-~^]+", ln) for ln in block):
                continue
            text = " ".join(" ".join(block).split())
            if len(text) >= 20 and _letters_share(text) >= 0.7 and text[-1] in ".:?!)":
                documents.append(text)
    return documents

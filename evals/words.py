"""Word tokens and the invented-word ruler.

A "word" is a run of letters (any script, accents included), optionally joined by an
apostrophe or hyphen between letters: "guarda-chuva", "d'água", "disse-lhe" are one word each.
Digits, underscores and punctuation are never part of a word, so "abc123" yields "abc".
Words are compared NFC-normalised and case-folded, with the typographic apostrophe (’) and the
Unicode hyphen (‐) mapped to their ASCII forms, so "D’Água" and "d'água" are the same word.

The dictionary is built from the big corpus and keeps words seen at least `min_count` times
(3 by default): a dictionary drawn from the small SFT set calls real words invented, and
one-off typos in a big corpus would let invented words pass.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

_JOINERS = "'’\\-‐"  # apostrophe, right single quote, hyphen-minus, Unicode hyphen
# Combining diacritics continue a word, so decomposed (NFD) text still yields whole words
# when it cannot be normalised first (masks work on the exact bytes a tokenizer saw).
_MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
_CANONICAL_JOINERS = str.maketrans({"’": "'", "‐": "-"})

MAX_EXAMPLES = 20


def _ranges(code_points: list[int]) -> str:
    parts: list[str] = []
    start = prev = code_points[0]
    for cp in code_points[1:] + [-2]:
        if cp != prev + 1:
            parts.append(re.escape(chr(start)) if start == prev
                         else f"{re.escape(chr(start))}-{re.escape(chr(prev))}")
            start = cp
        prev = cp
    return "".join(parts)


@functools.cache
def word_pattern() -> re.Pattern[str]:
    """The compiled word regex (built once: it needs a scan of the Unicode table)."""
    # `[^\W\d_]` still admits numerics that are not decimal digits ("²", "½", "Ⅻ");
    # they are excluded explicitly so only true letters start or continue a word.
    numerics = [cp for cp in range(sys.maxunicode + 1)
                if (ch := chr(cp)).isalnum() and not ch.isalpha() and not ch.isdecimal()]
    letter = rf"[^\W\d_{_ranges(numerics)}]"
    piece = rf"{letter}(?:{letter}|[{_MARKS}])*"
    return re.compile(rf"{piece}(?:[{_JOINERS}]{piece})*")


def normalize_word(word: str) -> str:
    """The comparable form of a word: NFC, case-folded, ASCII apostrophe and hyphen."""
    return unicodedata.normalize("NFC", word).casefold().translate(_CANONICAL_JOINERS)


def words(text: str) -> list[str]:
    """The normalised word tokens of `text`, in order."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    nfc = unicodedata.normalize("NFC", text)
    return [normalize_word(m.group()) for m in word_pattern().finditer(nfc)]


def _texts(texts: Iterable[str], name: str) -> Iterator[str]:
    # A bare string is itself iterable (over characters), which would silently turn a
    # text into one-letter "words": refuse it.
    if isinstance(texts, str):
        raise TypeError(f"{name} must be an iterable of strings, not a single str")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(text).__name__}")
        yield text


def _words_digest(sorted_words: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted_words).encode("utf-8")).hexdigest()


class Dictionary:
    """The set of words seen at least `min_count` times in a corpus."""

    FORMAT = "tatu-dictionary/1"

    def __init__(self, known_words: Iterable[str], min_count: int,
                 n_tokens_seen: int = 0, n_distinct_seen: int = 0) -> None:
        self.min_count = min_count
        self._words = frozenset(normalize_word(w) for w in known_words)
        # What the corpus held before the min_count cut, so a report can say
        # "1,422,647 distinct words -> 566,812 kept".
        self.n_tokens_seen = n_tokens_seen
        self.n_distinct_seen = n_distinct_seen

    @classmethod
    def build(cls, texts: Iterable[str], min_count: int = 3) -> Dictionary:
        if not isinstance(min_count, int) or min_count < 1:
            raise ValueError(f"min_count must be an integer >= 1, got {min_count!r}")
        counts: Counter[str] = Counter()
        for text in _texts(texts, "texts"):
            counts.update(words(text))
        kept = [w for w, c in counts.items() if c >= min_count]
        return cls(kept, min_count, n_tokens_seen=sum(counts.values()),
                   n_distinct_seen=len(counts))

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and normalize_word(word) in self._words

    def __len__(self) -> int:
        return len(self._words)

    def sha256(self) -> str:
        """A digest of the sorted word list: identifies the ruler a number was measured with."""
        return _words_digest(sorted(self._words))

    def save(self, path: str | Path) -> None:
        sorted_words = sorted(self._words)
        payload = {
            "format": self.FORMAT,
            "min_count": self.min_count,
            "n_words": len(sorted_words),
            "n_tokens_seen": self.n_tokens_seen,
            "n_distinct_seen": self.n_distinct_seen,
            "sha256": _words_digest(sorted_words),
            "words": sorted_words,
        }
        Path(path).write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Dictionary:
        path = Path(path)
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{exc.lineno}: not a JSON dictionary file "
                             f"({exc.msg})") from exc
        if not isinstance(payload, dict) or payload.get("format") != cls.FORMAT:
            raise ValueError(f"{path}: not a {cls.FORMAT} file (format field is "
                             f"{payload.get('format') if isinstance(payload, dict) else None!r})")
        for key in ("min_count", "sha256", "words"):
            if key not in payload:
                raise ValueError(f"{path}: missing field {key!r}")
        stored = payload["words"]
        if not isinstance(stored, list) or not all(isinstance(w, str) for w in stored):
            raise ValueError(f"{path}: field 'words' must be a list of strings")
        digest = _words_digest(sorted(stored))
        if digest != payload["sha256"]:
            raise ValueError(f"{path}: sha256 of the word list is {digest}, the file says "
                             f"{payload['sha256']}: the file was altered or truncated")
        return cls(stored, int(payload["min_count"]),
                   n_tokens_seen=int(payload.get("n_tokens_seen", 0)),
                   n_distinct_seen=int(payload.get("n_distinct_seen", 0)))


@dataclass(frozen=True)
class InventedWords:
    """Share of word tokens not in the dictionary.

    `rate` is n_invented / n_words, and 0.0 (not NaN) when the texts hold no words at all:
    an empty generation invents nothing, and a NaN would poison every later average.
    Check `n_words` to tell "no invented words" from "no words".
    """

    rate: float
    n_words: int
    n_invented: int
    examples: list[str]  # distinct invented words in first-seen order, at most MAX_EXAMPLES


def invented_rate(texts: Iterable[str], dictionary: Dictionary) -> InventedWords:
    n_words = n_invented = 0
    examples: dict[str, None] = {}  # an ordered set
    for text in _texts(texts, "texts"):
        for word in words(text):
            n_words += 1
            if word not in dictionary:
                n_invented += 1
                if len(examples) < MAX_EXAMPLES:
                    examples.setdefault(word)
    rate = n_invented / n_words if n_words else 0.0
    return InventedWords(rate=rate, n_words=n_words, n_invented=n_invented,
                         examples=list(examples))

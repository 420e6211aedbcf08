"""Two tokenizers behind one interface: character-level and byte-level BPE.

Both reserve the same special tokens (BOS, EOS, PAD and the SFT role markers). Specials are
never produced by `encode` from text — code inserts them — so a user string that happens to
contain "<|bos|>" round-trips as text, and `decode(encode(s)) == s` for every Unicode string.

`token_bytes[id]` is the UTF-8 byte length of what the id decodes to (0 for specials): the
evaluators divide by it to get bits per byte, the unit that compares tokenizers fairly.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Iterable

import numpy as np

from tatu.atomic import write_atomic

SPECIALS = ("<|bos|>", "<|eos|>", "<|pad|>", "<|user|>", "<|assistant|>")
FORMAT_VERSION = 1


class TokenizerError(ValueError):
    pass


def _special_id(token: str) -> property:
    """The id of a special token: the specials sit in SPECIALS order from `_specials_base`."""
    offset = SPECIALS.index(token)
    return property(lambda self: self._specials_base + offset, doc=f"id of {token}")


class Tokenizer:
    """The interface. Subclasses fill `_specials_base` (id of the first special, the specials
    are the last ids) and `_token_bytes`."""

    kind: str
    _specials_base: int
    _token_bytes: np.ndarray

    bos_id = _special_id("<|bos|>")
    eos_id = _special_id("<|eos|>")
    pad_id = _special_id("<|pad|>")
    user_id = _special_id("<|user|>")
    assistant_id = _special_id("<|assistant|>")

    @property
    def special_ids(self) -> frozenset[int]:
        return frozenset(range(self._specials_base, self._specials_base + len(SPECIALS)))

    @property
    def vocab_size(self) -> int:
        return self._specials_base + len(SPECIALS)

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        raise NotImplementedError

    def to_dict(self) -> dict:
        raise NotImplementedError

    @property
    def token_bytes(self) -> np.ndarray:
        return self._token_bytes

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True)

    @property
    def hash(self) -> str:
        """sha256 of the canonical JSON: what a data manifest and a checkpoint must agree on."""
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()

    def save(self, path: str | Path) -> None:
        """Write the JSON atomically: a crash leaves the old file or the new one, never half of one."""
        write_atomic(path, self.to_json())


class CharTokenizer(Tokenizer):
    """One id per character seen in training, with a byte fallback for unseen characters.

    Layout: ids 0..255 are raw bytes (fallback), then the known characters, then the specials.
    """

    kind = "char"

    def __init__(self, chars: Iterable[str]):
        self.chars = sorted(set(chars))
        for ch in self.chars:
            if len(ch) != 1:
                raise TokenizerError(f"char tokenizer: {ch!r} is not a single character")
        self._char_to_id = {ch: 256 + i for i, ch in enumerate(self.chars)}
        self._specials_base = 256 + len(self.chars)
        self._token_bytes = np.array(
            [1] * 256 + [len(ch.encode("utf-8")) for ch in self.chars] + [0] * len(SPECIALS),
            dtype=np.int64,
        )

    @classmethod
    def train(cls, texts: Iterable[str], max_chars: int | None = None) -> "CharTokenizer":
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(text)
        chars = [ch for ch, _ in counts.most_common(max_chars)]
        return cls(chars)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for ch in text:
            known = self._char_to_id.get(ch)
            if known is not None:
                ids.append(known)
            else:
                ids.extend(ch.encode("utf-8"))
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        out = bytearray()
        for i in ids:
            i = int(i)
            if 0 <= i < 256:
                out.append(i)
            elif 256 <= i < self._specials_base:
                out += self.chars[i - 256].encode("utf-8")
            elif i >= self.vocab_size or i < 0:
                raise TokenizerError(f"char tokenizer: id {i} out of range (vocab {self.vocab_size})")
        return out.decode("utf-8", errors="replace")

    def to_dict(self) -> dict:
        return {"kind": "char", "version": FORMAT_VERSION, "specials": list(SPECIALS), "chars": self.chars}


def _bytes_to_unicode() -> dict[int, str]:
    """The byte -> printable character table of byte-level BPE (GPT-2's convention)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    table = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return table


_BYTE_OF_CHAR = {ch: b for b, ch in _bytes_to_unicode().items()}


class BPETokenizer(Tokenizer):
    """Byte-level BPE trained with HF `tokenizers`; specials are appended after its vocabulary."""

    kind = "bpe"

    def __init__(self, hf_json: str):
        from tokenizers import Tokenizer as HFTokenizer

        self._hf_json = hf_json
        self._hf = HFTokenizer.from_str(hf_json)
        base = self._hf.get_vocab_size(with_added_tokens=True)
        self._specials_base = base
        vocab = self._hf.get_vocab(with_added_tokens=True)
        self._piece_bytes: list[bytes] = [b""] * base
        for piece, idx in vocab.items():
            self._piece_bytes[idx] = bytes(_BYTE_OF_CHAR[ch] for ch in piece)
        self._token_bytes = np.array(
            [len(p) for p in self._piece_bytes] + [0] * len(SPECIALS), dtype=np.int64
        )

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, min_frequency: int = 2,
              show_progress: bool = False) -> "BPETokenizer":
        from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, trainers

        hf = HFTokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
        n_merged = vocab_size - len(SPECIALS)
        if n_merged < 256:
            raise TokenizerError(f"bpe: vocab {vocab_size} too small (needs >= {256 + len(SPECIALS)})")
        trainer = trainers.BpeTrainer(
            vocab_size=n_merged,
            min_frequency=min_frequency,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=show_progress,  # tokenizers' own bars (counting, then merges) on stderr
        )
        hf.train_from_iterator(texts, trainer=trainer)
        return cls(hf.to_str())

    def encode(self, text: str) -> list[int]:
        return self._hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._hf.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        out = bytearray()
        for i in ids:
            i = int(i)
            if 0 <= i < self._specials_base:
                out += self._piece_bytes[i]
            elif not (0 <= i < self.vocab_size):
                raise TokenizerError(f"bpe tokenizer: id {i} out of range (vocab {self.vocab_size})")
        return out.decode("utf-8", errors="replace")

    def to_dict(self) -> dict:
        return {
            "kind": "bpe",
            "version": FORMAT_VERSION,
            "specials": list(SPECIALS),
            "hf": json.loads(self._hf_json),
        }


# a char tokenizer always holds the 256 byte-fallback ids and the specials
MIN_CHAR_VOCAB = 256 + len(SPECIALS)


def train_tokenizer(kind: str, texts: Iterable[str], vocab_size: int | None = None,
                    show_progress: bool = False) -> Tokenizer:
    if kind == "char":
        if vocab_size is not None and vocab_size < MIN_CHAR_VOCAB:
            raise TokenizerError(f"char: vocab {vocab_size} too small (needs >= {MIN_CHAR_VOCAB}: "
                                 f"256 byte ids + {len(SPECIALS)} specials)")
        return CharTokenizer.train(texts, max_chars=None if vocab_size is None else vocab_size - MIN_CHAR_VOCAB)
    if kind == "bpe":
        if vocab_size is None:
            raise TokenizerError("bpe: --vocab is required")
        return BPETokenizer.train(texts, vocab_size, show_progress=show_progress)
    raise TokenizerError(f"unknown tokenizer kind {kind!r} (expected 'char' or 'bpe')")

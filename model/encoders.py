"""The fastest encoder that gives a tokenizer's own ids: tiktoken for tatu's byte-level BPE.

tiktoken's BPE merges the adjacent pair whose concatenation has the lowest rank; `tokenizers`
merges the pair with the lowest merge index. With tiktoken's ranks = the tokenizer's ids, the
two agree wherever the ids follow the merges' order (BpeTrainer's layout; checked here) and the
pre-tokens are the same (GPT-2's split pattern is ByteLevel's regex, in both). They can still
differ: a vocabulary may hold a token with two splits into tokens (most trained ones hold
thousands), and tiktoken may reach it where `tokenizers` cannot. So tiktoken is used only
after it gave the same ids as `tokenizers` on adversarial strings and on a sample of the texts
it is about to encode; otherwise `tokenizers` encodes, and the build says why.

What the data build asks of an encoder is `encode_documents`: BOS + ids + EOS of every text,
concatenated. tiktoken does that in one call for all the texts of a chunk (see FRAME_BOS), and
the check above runs through that very call.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from tatu.model.tokenizer import _BYTE_OF_CHAR, Tokenizer

ENCODERS = ("auto", "tiktoken", "tokenizers")
# GPT-2's split pattern (tiktoken's gpt2), the regex of `tokenizers`' ByteLevel pre-tokenizer
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# Where two encoders could part: accents (composed and combining), emoji and joiners, whitespace
# runs of every kind, digits, contractions, very long words, control and unassigned characters.
ADVERSARIAL = (
    "", " ", "  ", "\n", "\n\n\n", "\t\t x", " \u00a0 \u2003x", "a  b   c    d", "fim.   \n  \n",
    "ação coração pão ÀÉÎÕÜ ç", "cafe\u0301 e\u0300 n\u0303", "ﬁ ẞ ß İı Ǆǅ", "😀😃 👩‍👩‍👧 🇧🇷 ✊🏾 1️⃣",
    "1234567890 3.14159 1,000,000 ٣٤٥ ¹²³ ½", "I'm you're he'll we've it's 'S 'T", "don't DON'T l'água d'água",
    "a" * 300, "pneumoultramicroscopicossilicovulcanoconiótico" * 4, "supercalifragilistic" + "ão" * 60,
    "日本語のテキスト 中文 한국어", "مرحبا بالعالم שלום", "\x00\x01\x7f \ufeff\u200b\u200d", "\U0001F9FF\U000E0001 \U0010FFFF",
    "x\r\ny\rz", "<|bos|> <|eos|> <|endoftext|>", "$%&*()[]{}<>!?;:--—–…··", "    def f(x):\n        return x\n",
)


# Two noncharacters (Unicode keeps U+FDD0..U+FDEF for a program's internal use) stand for BOS
# and EOS around every document of one tiktoken call: tiktoken cuts the text at its special
# tokens before its regex runs, so each document is pre-tokenized alone, exactly as if encoded
# by itself, and the ids come back as one buffer, without a Python int per token. Texts that
# hold either character are encoded one at a time instead.
FRAME_BOS, FRAME_EOS = "\ufdd0", "\ufdd1"
ADVERSARIAL += (f"a{FRAME_BOS}b{FRAME_EOS}c {FRAME_EOS}",)


class EncoderMismatch(ValueError):
    pass


def framed(ids_of_texts: Iterable[list[int]], bos: int, eos: int) -> np.ndarray:
    """BOS + ids + EOS of every text, concatenated, as uint32."""
    flat: list[int] = []
    for ids in ids_of_texts:
        flat.append(bos)
        flat.extend(ids)
        flat.append(eos)
    return np.asarray(flat, dtype=np.uint32)


@dataclass(frozen=True)
class Encoder:
    name: str  # "tiktoken" or "tokenizers"
    reason: str  # why this one
    encode_documents: Callable[[list[str]], np.ndarray]  # framed(): BOS + ids + EOS of each text
    eos_id: int

    def describe(self) -> dict:
        return {"name": self.name, "reason": self.reason}

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Each text's ids, cut out of encode_documents' output (what the check compares)."""
        flat = self.encode_documents(list(texts))
        ends = np.flatnonzero(flat == self.eos_id) + 1  # BOS/EOS never come out of a text
        return [flat[start + 1:end - 1].tolist() for start, end in zip([0, *ends[:-1]], ends)]


def _plain_byte_level_bpe(hf: dict) -> str | None:
    """None when `hf` (a `tokenizers` JSON) is a byte-level BPE tiktoken can reproduce, else why not."""
    model = hf.get("model") or {}
    pre = hf.get("pre_tokenizer") or {}
    checks = (
        (model.get("type") == "BPE", "not a BPE model"),
        (hf.get("normalizer") is None, "it has a normalizer"),
        (not hf.get("added_tokens"), "it has added tokens (matched in the text before BPE)"),
        (pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space"),
         "its pre-tokenizer is not ByteLevel(add_prefix_space=False) with GPT-2's regex"),
        (not model.get("dropout") and not model.get("continuing_subword_prefix")
         and not model.get("end_of_word_suffix") and not model.get("byte_fallback") and not model.get("ignore_merges"),
         "its BPE has dropout, affixes, byte fallback or ignore_merges"),
    )
    return next((why for ok, why in checks if not ok), None)


def _merge_order_is_id_order(model: dict) -> bool:
    vocab, merges = model["vocab"], model.get("merges") or []
    pairs = [m.split(" ") if isinstance(m, str) else m for m in merges]
    ids = [vocab.get("".join(p), -1) for p in pairs]
    return all(i >= 0 for i in ids) and all(a < b for a, b in zip(ids, ids[1:]))


def tiktoken_encoding(tok: Tokenizer):
    """(a tiktoken Encoding with `tok`'s ids, None) or (None, why tiktoken cannot stand in)."""
    if tok.kind != "bpe":
        return None, f"a {tok.kind} tokenizer (tiktoken encodes byte-level BPE only)"
    hf = tok.to_dict()["hf"]
    why = _plain_byte_level_bpe(hf)
    if why is None and not _merge_order_is_id_order(hf["model"]):
        why = "its ids do not follow the order of its merges"
    if why is not None:
        return None, why
    import tiktoken

    ranks = {bytes(_BYTE_OF_CHAR[ch] for ch in piece): idx for piece, idx in hf["model"]["vocab"].items()}
    # encode_ordinary ignores the special tokens; encode_documents' one call per chunk uses them
    return tiktoken.Encoding(f"tatu-{tok.hash[:12]}", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={FRAME_BOS: tok.bos_id, FRAME_EOS: tok.eos_id}), None


def first_difference(tok: Tokenizer, encode_batch: Callable[[list[str]], list[list[int]]],
                     texts: Iterable[str]) -> str | None:
    """The first text whose ids differ from `tok.encode_batch`'s, shown briefly; None when none does."""
    texts = list(texts)
    mine_all = encode_batch(texts)
    if len(mine_all) != len(texts):
        return f"{len(texts)} texts (they came back as {len(mine_all)})"
    for text, mine, theirs in zip(texts, mine_all, tok.encode_batch(texts)):
        if mine != theirs:
            return json.dumps(text[:60], ensure_ascii=False)
    return None


def tokenizers_encoder(tok: Tokenizer, reason: str, serial: bool = False) -> Encoder:
    """The tokenizer itself: its batched encoder (a thread pool), or one text at a time (`serial`)."""
    batch = (None if serial else getattr(tok, "encode_batch", None)) or (lambda texts: [tok.encode(t) for t in texts])
    return Encoder("tokenizers" if tok.kind == "bpe" else tok.kind, reason,
                   lambda texts: framed(batch(texts), tok.bos_id, tok.eos_id), tok.eos_id)


def tiktoken_encoder(tok: Tokenizer, encoding, reason: str) -> Encoder:
    """`encoding` (tiktoken_encoding's) as an Encoder: one call for all the texts it is given."""
    frames = frozenset((FRAME_BOS, FRAME_EOS))
    bos, eos = tok.bos_id, tok.eos_id

    def encode_documents(texts: list[str]) -> np.ndarray:
        if not texts:
            return np.empty(0, dtype=np.uint32)
        ids = encoding.encode_to_numpy(FRAME_BOS + (FRAME_EOS + FRAME_BOS).join(texts) + FRAME_EOS,
                                       allowed_special=frames)
        # every frame character gives its id: exactly one BOS and one EOS per text when no text holds one
        if np.count_nonzero(ids == bos) == len(texts) and np.count_nonzero(ids == eos) == len(texts):
            return ids
        # one call per text: encode_ordinary_batch's thread pool costs a future per text, more than
        # it gains (the data build's parallelism is worker processes, model/../data/text_shards.py)
        return framed((encoding.encode_ordinary(text) for text in texts), bos, eos)

    return Encoder("tiktoken", reason, encode_documents, eos)


def named_encoder(tok: Tokenizer, name: str) -> Encoder:
    """The encoder `name` as choose_encoder made it, unchecked and serial: for a worker process
    (the parallelism is the processes) whose parent checked it."""
    if name == "tiktoken":
        encoding, why = tiktoken_encoding(tok)
        if encoding is None:
            raise EncoderMismatch(f"tiktoken cannot encode this tokenizer: {why}")
        return tiktoken_encoder(tok, encoding, "")
    return tokenizers_encoder(tok, "", serial=True)


def choose_encoder(tok: Tokenizer, sample: Iterable[str], wanted: str = "auto") -> Encoder:
    """tiktoken when it gives `tok`'s ids on ADVERSARIAL and on `sample`; `tokenizers` otherwise
    (wanted="tiktoken": EncoderMismatch instead; wanted="tokenizers": never tiktoken)."""
    if wanted not in ENCODERS:
        raise ValueError(f"encoder {wanted!r}: expected one of {', '.join(ENCODERS)}")
    if wanted == "tokenizers" or tok.kind != "bpe":
        return tokenizers_encoder(tok, "asked for" if wanted == "tokenizers" else f"a {tok.kind} tokenizer")
    encoding, why = tiktoken_encoding(tok)
    if encoding is None:
        if wanted == "tiktoken":
            raise EncoderMismatch(f"tiktoken cannot encode this tokenizer: {why}")
        return tokenizers_encoder(tok, f"tiktoken cannot stand in: {why}")
    candidate = tiktoken_encoder(tok, encoding, "")
    sample = list(sample)
    # the texts that hold a frame character go through the one-text-at-a-time path: checked apart
    framing = [t for t in [*ADVERSARIAL, *sample] if FRAME_BOS in t or FRAME_EOS in t]
    plain = [t for t in [*ADVERSARIAL, *sample] if not (FRAME_BOS in t or FRAME_EOS in t)]
    differs = (first_difference(tok, candidate.encode_batch, plain)
               or first_difference(tok, candidate.encode_batch, framing))
    if differs is not None:
        if wanted == "tiktoken":
            raise EncoderMismatch(f"tiktoken's ids differ from tokenizers' on {differs}")
        return tokenizers_encoder(tok, f"tiktoken's ids differ from tokenizers' on {differs}")
    return dataclasses.replace(candidate, reason=f"same ids as tokenizers on {len(ADVERSARIAL)} adversarial strings "
                                                 f"and {len(sample)} sampled documents")

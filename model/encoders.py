"""The fastest encoder that gives a tokenizer's own ids: tiktoken for tatu's byte-level BPE.

tiktoken's BPE merges the adjacent pair whose concatenation has the lowest rank; `tokenizers`
merges the pair with the lowest merge index. With tiktoken's ranks = the tokenizer's ids, the
two agree wherever the ids follow the merges' order (BpeTrainer's layout; checked here) and the
pre-tokens are the same (GPT-2's split pattern is ByteLevel's regex, in both). They can still
differ: a vocabulary may hold a token with two splits into tokens (most trained ones hold
thousands), and tiktoken may reach it where `tokenizers` cannot. So tiktoken is used only
after it gave the same ids as `tokenizers` on adversarial strings and on a sample of the texts
it is about to encode; otherwise `tokenizers` encodes, and the build says why.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable

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


class EncoderMismatch(ValueError):
    pass


@dataclass(frozen=True)
class Encoder:
    name: str  # "tiktoken" or "tokenizers"
    reason: str  # why this one
    encode_batch: Callable[[list[str]], list[list[int]]]

    def describe(self) -> dict:
        return {"name": self.name, "reason": self.reason}


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
    return tiktoken.Encoding(f"tatu-{tok.hash[:12]}", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={}), None


def first_difference(tok: Tokenizer, encode_batch: Callable[[list[str]], list[list[int]]],
                     texts: Iterable[str]) -> str | None:
    """The first text whose ids differ from `tok.encode_batch`'s, shown briefly; None when none does."""
    texts = list(texts)
    for text, mine, theirs in zip(texts, encode_batch(texts), tok.encode_batch(texts)):
        if mine != theirs:
            return json.dumps(text[:60], ensure_ascii=False)
    return None


def tokenizers_encoder(tok: Tokenizer, reason: str) -> Encoder:
    batch = getattr(tok, "encode_batch", None)
    return Encoder("tokenizers" if tok.kind == "bpe" else tok.kind, reason,
                   batch if batch is not None else (lambda texts: [tok.encode(t) for t in texts]))


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

    def batch(texts: list[str]) -> list[list[int]]:
        # one call per text: encode_ordinary_batch's thread pool costs a future per text, more than
        # it gains (the data build's parallelism is worker processes, model/../data/text_shards.py)
        return [encoding.encode_ordinary(text) for text in texts]

    sample = list(sample)
    differs = first_difference(tok, batch, [*ADVERSARIAL, *sample])
    if differs is not None:
        if wanted == "tiktoken":
            raise EncoderMismatch(f"tiktoken's ids differ from tokenizers' on {differs}")
        return tokenizers_encoder(tok, f"tiktoken's ids differ from tokenizers' on {differs}")
    return Encoder("tiktoken", f"same ids as tokenizers on {len(ADVERSARIAL)} adversarial strings "
                               f"and {len(sample)} sampled documents", batch)

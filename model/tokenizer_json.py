"""The tokenizer files tatu reads and writes: its own JSON (`Tokenizer.to_dict`) and the
`tokenizers` library's tokenizer.json that transformers uses, both ways, with the same ids.

tatu's byte-level BPE is already a `tokenizers` model; the export appends the five specials as
added tokens at the ids tatu gives them. The char tokenizer becomes a merge-free BPE with byte
fallback: ids 0..255 are the byte tokens "<0xNN>", then one token per known character, then the
specials, which is exactly tatu's layout, so every id is the same. `load_tokenizer` and
`tokenizer_from_dict` take either format, so `tatu data build --tokenizer` accepts an exported
tokenizer.json and a GPT-2 directory's tokenizer is tatu's.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

from tatu.model.tokenizer import SPECIALS, BPETokenizer, CharTokenizer, Tokenizer, TokenizerError


class HFTokenizerError(TokenizerError):
    """A tokenizer.json (or a tatu tokenizer) that the other side's format cannot express exactly."""


# ---- tokenizer -------------------------------------------------------------------------------

def _added(token_id: int, content: str) -> dict:
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def _byte_token(b: int) -> str:
    return f"<0x{b:02X}>"


def tokenizer_to_hf(tokenizer: Tokenizer) -> dict:
    """tokenizer.json (a `tokenizers` model) that gives every text tatu's ids."""
    specials = [_added(tokenizer.bos_id + i, s) for i, s in enumerate(SPECIALS)]
    if isinstance(tokenizer, BPETokenizer):
        payload = copy.deepcopy(tokenizer.to_dict()["hf"])
        payload["added_tokens"] = list(payload.get("added_tokens") or []) + specials
        return payload
    if isinstance(tokenizer, CharTokenizer):
        vocab = {_byte_token(b): b for b in range(256)}
        vocab.update({ch: 256 + i for i, ch in enumerate(tokenizer.chars)})
        return {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": specials,
            "normalizer": None, "pre_tokenizer": None, "post_processor": None,
            "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": True,
                      "ignore_merges": False, "vocab": vocab, "merges": []},
        }
    raise HFTokenizerError(f"tokenizer kind {tokenizer.kind!r} has no export")


def _is_tatu_char_model(payload: dict) -> bool:
    model = payload.get("model") or {}
    return (model.get("type") == "BPE" and model.get("byte_fallback") is True and not model.get("merges")
            and payload.get("pre_tokenizer") is None and payload.get("normalizer") is None)


def _adds_nothing(post_processor) -> bool:
    """A TemplateProcessing that inserts no token: the same encoding as no post-processor."""
    return (isinstance(post_processor, dict) and post_processor.get("type") == "TemplateProcessing"
            and post_processor.get("single") == [{"Sequence": {"id": "A", "type_id": 0}}]
            and post_processor.get("pair") == [{"Sequence": {"id": "A", "type_id": 0}},
                                               {"Sequence": {"id": "B", "type_id": 1}}]
            and not post_processor.get("special_tokens"))


def tokenizer_from_hf(payload: dict, source: str = "<tokenizer.json>") -> Tokenizer:
    """A tokenizer.json -> tatu's Tokenizer with the same ids, or HFTokenizerError saying why not.

    tatu needs its five specials (<|bos|> <|eos|> <|pad|> <|user|> <|assistant|>) as the last
    five ids, in that order: SFT pairs and eval lines are built from them.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("model"), dict):
        raise HFTokenizerError(f"{source}: not a `tokenizers` JSON (no 'model' object)")
    model = payload["model"]
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise HFTokenizerError(f"{source}: model type {model.get('type')!r}; tatu reads byte-level BPE or its own char model")
    added = list(payload.get("added_tokens") or [])
    tail = added[-len(SPECIALS):]
    # GPT-2's own tokenizer.json lists <|endoftext|> both in the vocab and as an added token
    ids = [i for i in model["vocab"].values() if isinstance(i, int)] + [t.get("id", -1) for t in added]
    base = max(ids, default=-1) + 1 - len(SPECIALS)
    expected = [(base + i, s) for i, s in enumerate(SPECIALS)]
    if [(t.get("id"), t.get("content")) for t in tail] != expected:
        found = [(t.get("id"), t.get("content")) for t in tail]
        raise HFTokenizerError(
            f"{source}: tatu needs its special tokens {list(SPECIALS)} as the last ids {base}..{base + len(SPECIALS) - 1}, "
            f"found {found}; add them (tokenizer.add_special_tokens) and resize the model's embeddings to match")
    rest = copy.deepcopy(payload)
    rest["added_tokens"] = added[: -len(SPECIALS)]
    if _adds_nothing(rest.get("post_processor")):  # transformers' save_pretrained writes one
        rest["post_processor"] = None
    if _is_tatu_char_model(payload):
        if rest["added_tokens"]:
            raise HFTokenizerError(f"{source}: a char model with extra added tokens {rest['added_tokens'][:3]}")
        vocab = model["vocab"]
        if any(vocab.get(_byte_token(b)) != b for b in range(256)):
            raise HFTokenizerError(f"{source}: a byte-fallback model whose ids 0..255 are not the bytes <0x00>..<0xFF>")
        chars = sorted((i, t) for t, i in vocab.items() if i >= 256)
        try:
            tok = CharTokenizer([t for _, t in chars])
        except TokenizerError as exc:
            raise HFTokenizerError(f"{source}: a byte-fallback model that is not tatu's char tokenizer ({exc})") from None
        if any(tok.encode(t) != [i] for i, t in chars):
            raise HFTokenizerError(f"{source}: a char model whose characters are not single characters in sorted order")
        return tok
    pre = payload.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel":
        raise HFTokenizerError(f"{source}: pre_tokenizer {pre.get('type')!r}; tatu's BPE is byte-level (ByteLevel)")
    try:
        return BPETokenizer(json.dumps(rest, ensure_ascii=False))
    except Exception as exc:  # tokenizers reports a malformed model as a bare Exception
        raise HFTokenizerError(f"{source}: unusable byte-level BPE ({exc})") from None


def tokenizer_from_dict(payload: dict, source: str = "<tokenizer>") -> Tokenizer:
    if not isinstance(payload, dict):
        raise TokenizerError(f"{source}: expected a JSON object, got {type(payload).__name__}")
    if "kind" not in payload and "model" in payload:  # a transformers/`tokenizers` tokenizer.json
        return tokenizer_from_hf(payload, source)
    kind = payload.get("kind")
    if payload.get("specials") != list(SPECIALS):
        raise TokenizerError(f"{source}: unexpected special tokens {payload.get('specials')!r}")
    if kind not in ("char", "bpe"):
        raise TokenizerError(f"{source}: unknown tokenizer kind {kind!r} (expected 'char' or 'bpe')")
    field = "chars" if kind == "char" else "hf"
    if field not in payload:
        raise TokenizerError(f"{source}: {kind} tokenizer lacks the field {field!r}")
    if kind == "char":
        chars = payload["chars"]
        if not isinstance(chars, list) or not all(isinstance(ch, str) for ch in chars):
            raise TokenizerError(f"{source}: field 'chars' is not a list of strings")
        try:
            return CharTokenizer(chars)
        except TokenizerError as exc:
            raise TokenizerError(f"{source}: {exc}") from None
    try:
        return BPETokenizer(json.dumps(payload["hf"]))
    except Exception as exc:  # HF `tokenizers` reports a malformed model as a bare Exception
        raise TokenizerError(f"{source}: field 'hf' is not a valid byte-level BPE model: {exc}") from None


def load_tokenizer(path: str | Path) -> Tokenizer:
    path = Path(path)
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{path}: cannot read tokenizer: {exc}") from exc
    return tokenizer_from_dict(payload, str(path))

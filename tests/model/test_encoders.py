"""tiktoken as the data build's encoder: the ids of `tokenizers` on adversarial and random text, and
`tokenizers` itself wherever tiktoken would give other ids (a vocabulary built so that it does)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tiny_world import EN_WORDS, PT_WORDS, sentences

from tatu.model.encoders import ADVERSARIAL, EncoderMismatch, choose_encoder, tiktoken_encoding
from tatu.model.tokenizer import BPETokenizer, CharTokenizer, _bytes_to_unicode
from tatu.ops.cli import main as tatu


@pytest.fixture(scope="module")
def bpe():
    texts = sentences(PT_WORDS, 400, 1) + sentences(EN_WORDS, 400, 2) + list(ADVERSARIAL)
    return BPETokenizer.train(texts, vocab_size=700)


def test_tiktoken_gives_the_tokenizers_ids_on_every_adversarial_string(bpe):
    encoding, why = tiktoken_encoding(bpe)
    assert why is None
    for text in ADVERSARIAL:
        assert encoding.encode_ordinary(text) == bpe.encode(text), repr(text)
    encoder = choose_encoder(bpe, sentences(PT_WORDS, 50, 9))
    assert encoder.name == "tiktoken" and "50 sampled documents" in encoder.reason


@settings(max_examples=150, deadline=None)
@given(text=st.text(st.characters(codec="utf-8"), max_size=80)
       | st.lists(st.sampled_from(PT_WORDS + EN_WORDS + [" ", "  ", "\n", "\t", "'s", "2024", "ção", "😀"]),
                  max_size=30).map("".join))
def test_tiktoken_gives_the_tokenizers_ids_on_random_text(bpe, text):
    encoding, _ = tiktoken_encoding(bpe)
    assert encoding.encode_ordinary(text) == bpe.encode(text)


def _byte(ch: str) -> str:
    return _bytes_to_unicode()[ord(ch)]


def crossed_vocab() -> BPETokenizer:
    """Merges b+c, a+b, c+d, ab+cd, in that order: `tokenizers` turns "abcd" into a|bc|d (bc first,
    then no merge applies), tiktoken finds the whole word in its ranks and gives abcd."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = [_bytes_to_unicode()[b] for b in range(256)]
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = [("b", "c"), ("a", "b"), ("c", "d"), ("ab", "cd")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    hf = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    return BPETokenizer(hf.to_str())


def test_where_tiktoken_differs_the_tokenizer_encodes_and_says_why():
    tok = crossed_vocab()
    encoding, _ = tiktoken_encoding(tok)
    assert encoding.encode_ordinary("abcd") != tok.encode("abcd")  # the premise: they do differ
    encoder = choose_encoder(tok, ["xyz", "abcd"])
    assert encoder.name == "tokenizers" and encoder.reason == 'tiktoken\'s ids differ from tokenizers\' on "abcd"'
    assert encoder.encode_batch(["abcd"]) == [tok.encode("abcd")]
    with pytest.raises(EncoderMismatch, match="differ"):
        choose_encoder(tok, ["abcd"], wanted="tiktoken")
    assert choose_encoder(tok, ["xyz"]).name == "tiktoken"  # a sample without the crossing passes


def test_a_tokenizer_tiktoken_cannot_mimic_is_never_handed_to_it():
    char = CharTokenizer.train(["abc"])
    assert choose_encoder(char, ["abc"]).name == "char"
    payload = crossed_vocab().to_dict()["hf"]
    payload["normalizer"] = {"type": "NFC"}
    encoder = choose_encoder(BPETokenizer(json.dumps(payload)), ["abc"])
    assert encoder.name == "tokenizers" and encoder.reason == "tiktoken cannot stand in: it has a normalizer"


def test_the_build_falls_back_on_a_sample_that_differs_and_refuses_a_forced_tiktoken(tmp_path, capsys):
    tok = crossed_vocab()
    tok.save(tmp_path / "tok.json")
    (tmp_path / "a.txt").write_text("abcd abc\n\nbcd\n", encoding="utf-8")
    args = ["data", "build", "--tokenizer", str(tmp_path / "tok.json"), "--text", f"pretrain={tmp_path / 'a.txt'}"]
    assert tatu([*args, "--out", str(tmp_path / "forced"), "--encoder", "tiktoken"]) == 78
    assert "--encoder tiktoken: tiktoken's ids differ from tokenizers' on" in capsys.readouterr().err
    assert not (tmp_path / "forced").exists()
    assert tatu([*args, "--out", str(tmp_path / "data")]) == 0
    assert "encoder tokenizers (tiktoken's ids differ from tokenizers' on \"abcd abc\")" in capsys.readouterr().out
    shard = np.fromfile(tmp_path / "data" / "pretrain" / "tokens.bin", dtype=np.uint16).tolist()
    expected = [tok.bos_id, *tok.encode("abcd abc"), tok.eos_id, tok.bos_id, *tok.encode("bcd"), tok.eos_id]
    assert shard == expected


@settings(max_examples=100, deadline=None)
@given(texts=st.lists(st.text(st.characters(codec="utf-8"), max_size=40)
                      | st.sampled_from(list(ADVERSARIAL)), max_size=12))
def test_one_call_for_many_documents_gives_each_documents_own_ids(bpe, texts):
    """encode_documents frames the texts in one tiktoken call (two noncharacters as BOS/EOS
    special tokens) and must give BOS + the tokenizer's ids + EOS of each, also for texts that
    hold those characters (encoded one at a time)."""
    encoder = choose_encoder(bpe, [])
    assert encoder.name == "tiktoken"
    expected = [i for text in texts for i in (bpe.bos_id, *bpe.encode(text), bpe.eos_id)]
    assert encoder.encode_documents(texts).tolist() == expected
    assert encoder.encode_batch(texts) == [bpe.encode(text) for text in texts]

"""The SFT layout: which tokens are context and which are targets."""

import pytest

from tatu.model.chat import encode_messages, encode_pair, encode_prompt
from tatu.model.tokenizer import BPETokenizer, CharTokenizer

TEXTS = ["Qual é a capital do Brasil?", "A capital é Brasília.\nFica no Planalto Central.", "ação 🐢 coração"] * 10


@pytest.fixture(scope="module", params=["char", "bpe"])
def tok(request):
    if request.param == "char":
        return CharTokenizer.train(TEXTS)
    return BPETokenizer.train(TEXTS, vocab_size=300)


def targets_of(ids, mask):
    return [i for i, m in zip(ids, mask) if m]


def test_encode_prompt_layout(tok):
    assert encode_prompt(tok, "Olá?") == [tok.bos_id, tok.user_id, *tok.encode("Olá?"), tok.assistant_id]


@pytest.mark.parametrize(
    "prompt, response",
    [
        ("Qual é a capital do Brasil?", "Brasília."),
        ("Escreva duas linhas", "A capital é Brasília.\nFica no Planalto Central.\n"),
        ("emoji?", "ação 🐢 coração — sim"),
        ("", "x"),
    ],
)
def test_encode_pair_marks_exactly_response_and_eos(tok, prompt, response):
    ids, mask = encode_pair(tok, prompt, response)
    assert len(ids) == len(mask)
    response_ids = tok.encode(response)
    assert targets_of(ids, mask) == response_ids + [tok.eos_id]
    # The targets are one contiguous tail, right after <|assistant|>.
    first = mask.index(True)
    assert all(mask[first:]) and not any(mask[:first])
    assert ids[first - 1] == tok.assistant_id
    assert ids[:first] == encode_prompt(tok, prompt)
    assert tok.decode(targets_of(ids, mask)) == response


def test_encode_messages_multi_turn(tok):
    messages = [
        {"role": "system", "content": "Responda em português."},
        {"role": "user", "content": "Qual é a capital?"},
        {"role": "assistant", "content": "Brasília."},
        {"role": "user", "content": "E a maior cidade?"},
        {"role": "assistant", "content": "São Paulo.\nCom folga."},
    ]
    ids, mask = encode_messages(tok, messages)
    e = tok.encode
    expected = (
        [tok.bos_id]
        + [tok.user_id, *e("Responda em português.")]
        + [tok.user_id, *e("Qual é a capital?"), tok.assistant_id]
        + [*e("Brasília."), tok.eos_id]
        + [tok.user_id, *e("E a maior cidade?"), tok.assistant_id]
        + [*e("São Paulo.\nCom folga."), tok.eos_id]
    )
    assert ids == expected
    assert targets_of(ids, mask) == e("Brasília.") + [tok.eos_id] + e("São Paulo.\nCom folga.") + [tok.eos_id]
    # Every target is either assistant text or the EOS closing it; no role marker is ever a target.
    assert not {tok.user_id, tok.assistant_id, tok.bos_id} & set(targets_of(ids, mask))


def test_single_turn_messages_equal_encode_pair(tok):
    pair = encode_pair(tok, "Qual é a capital?", "Brasília.")
    messages = encode_messages(
        tok, [{"role": "user", "content": "Qual é a capital?"}, {"role": "assistant", "content": "Brasília."}]
    )
    assert messages == pair


def test_unknown_role_is_named(tok):
    with pytest.raises(ValueError, match="'bot'"):
        encode_messages(tok, [{"role": "bot", "content": "oi"}])

"""Both tokenizers: lossless round trip, byte accounting, specials, JSON persistence, bad files."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tatu.model.tokenizer import (
    SPECIALS,
    BPETokenizer,
    CharTokenizer,
    TokenizerError,
    load_tokenizer,
    tokenizer_from_dict,
    train_tokenizer,
)

CORPUS = [
    "O tatu-bola é um mamífero que se enrola numa bola quando ameaçado.",
    "Ação, coração, pão, mãe, avó, você, três, pôr, açúcar, ênfase, à noite.",
    "The armadillo rolls into a ball when threatened; it lives in Brazil.",
    "São Paulo e Rio de Janeiro são as maiores cidades do Brasil. 🇧🇷🐢",
    "Perguntas: o que é? quanto custa? onde fica? 123 4567 89.",
] * 20

# Text that stresses the edges: accents, emoji (incl. ZWJ sequences and flags), literal
# special-token strings, whitespace runs, control characters and astral-plane characters.
EDGE_TEXTS = [
    "",
    "ção",
    "Olá, mundo! 👋🏽 👨‍👩‍👧 🇵🇹",
    "<|bos|>",
    "texto <|eos|> no meio <|pad|><|user|><|assistant|>",
    "  espaços   e\ttabs\n\nlinhas\r\n",
    "\x00\x01\x7f",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈 \U0010ffff",
]

unicode_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=60)
text_with_specials = st.lists(st.one_of(unicode_text, st.sampled_from(SPECIALS)), max_size=6).map("".join)
portuguese_text = st.text(alphabet="aãâáàeéêiíoõôóuúçÇÃÉ 🐢🇧🇷,.!?\n", max_size=60)
any_text = st.one_of(unicode_text, text_with_specials, portuguese_text)


@pytest.fixture(scope="module")
def char_tok():
    return CharTokenizer.train(CORPUS)


@pytest.fixture(scope="module")
def bpe_tok():
    return BPETokenizer.train(CORPUS, vocab_size=400)


@pytest.fixture(scope="module", params=["char", "bpe"])
def tok(request, char_tok, bpe_tok):
    return {"char": char_tok, "bpe": bpe_tok}[request.param]


def _check_round_trip_and_bytes(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert int(tok.token_bytes[ids].sum()) == len(text.encode("utf-8"))
    # Specials never come out of encode, even for text that spells them.
    assert not set(ids) & tok.special_ids


@pytest.mark.parametrize("text", EDGE_TEXTS)
def test_edge_texts_round_trip(tok, text):
    _check_round_trip_and_bytes(tok, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=any_text)
def test_char_round_trip_property(char_tok, text):
    _check_round_trip_and_bytes(char_tok, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=any_text)
def test_bpe_round_trip_property(bpe_tok, text):
    _check_round_trip_and_bytes(bpe_tok, text)


def test_bpe_actually_merges(bpe_tok):
    # A BPE that fell back to bytes would pass the round trip; it must compress the corpus.
    text = CORPUS[0]
    assert len(bpe_tok.encode(text)) < 0.6 * len(text.encode("utf-8"))


def test_char_known_chars_take_one_id_and_unknown_fall_back_to_bytes(char_tok):
    assert len(char_tok.encode("ação")) == 4
    assert "€" not in "".join(CORPUS)
    assert char_tok.encode("€") == list("€".encode("utf-8"))


def test_specials_are_distinct_zero_byte_and_decode_to_nothing(tok):
    ids = [tok.bos_id, tok.eos_id, tok.pad_id, tok.user_id, tok.assistant_id]
    assert len(set(ids)) == len(SPECIALS)
    assert set(ids) == set(tok.special_ids)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert all(int(tok.token_bytes[i]) == 0 for i in ids)
    assert len(tok.token_bytes) == tok.vocab_size
    # Every non-special id covers at least one byte, so bits-per-byte never divides by zero.
    non_special = [i for i in range(tok.vocab_size) if i not in tok.special_ids]
    assert all(int(tok.token_bytes[i]) >= 1 for i in non_special)
    assert tok.decode([tok.bos_id, *tok.encode("oi"), tok.eos_id]) == "oi"


def test_token_bytes_match_each_id_decoded_alone(tok):
    # Ids whose bytes form valid UTF-8 on their own decode to exactly token_bytes[id] bytes.
    checked = 0
    for i in range(tok.vocab_size):
        if i in tok.special_ids:
            continue
        text = tok.decode([i])
        if "\ufffd" not in text:
            assert len(text.encode("utf-8")) == int(tok.token_bytes[i]), i
            checked += 1
    assert checked > 100


def test_decode_rejects_out_of_range_ids(tok):
    with pytest.raises(TokenizerError, match="out of range"):
        tok.decode([tok.vocab_size])
    with pytest.raises(TokenizerError, match="out of range"):
        tok.decode([-1])


def test_save_load_round_trip(tok, tmp_path):
    file = tmp_path / "tokenizer.json"
    tok.save(file)
    loaded = load_tokenizer(file)
    assert type(loaded) is type(tok)
    assert loaded.hash == tok.hash
    assert loaded.vocab_size == tok.vocab_size
    assert (loaded.token_bytes == tok.token_bytes).all()
    assert [loaded.bos_id, loaded.eos_id, loaded.pad_id, loaded.user_id, loaded.assistant_id] == [
        tok.bos_id, tok.eos_id, tok.pad_id, tok.user_id, tok.assistant_id,
    ]
    for text in CORPUS[:5] + EDGE_TEXTS:
        assert loaded.encode(text) == tok.encode(text)


def test_hash_tells_tokenizers_apart(char_tok, bpe_tok):
    other_char = CharTokenizer.train(CORPUS + ["ñ"])
    assert len({char_tok.hash, bpe_tok.hash, other_char.hash}) == 3
    assert CharTokenizer.train(reversed(CORPUS)).hash == char_tok.hash


def test_train_tokenizer_dispatch():
    assert train_tokenizer("char", CORPUS).kind == "char"
    bpe = train_tokenizer("bpe", CORPUS, vocab_size=300)
    assert bpe.kind == "bpe" and bpe.vocab_size <= 300
    with pytest.raises(TokenizerError, match="unknown tokenizer kind 'wordpiece'"):
        train_tokenizer("wordpiece", CORPUS)
    with pytest.raises(TokenizerError, match="too small"):
        train_tokenizer("bpe", CORPUS, vocab_size=100)


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "cannot read tokenizer"),
        (json.dumps({"kind": "char", "version": 1, "specials": ["<s>"], "chars": []}), "unexpected special tokens"),
        (json.dumps({"kind": "sentencepiece", "version": 1, "specials": list(SPECIALS)}), "unknown tokenizer kind"),
    ],
)
def test_bad_file_names_the_file(tmp_path, content, message):
    file = tmp_path / "broken_tok.json"
    file.write_text(content)
    with pytest.raises(TokenizerError, match=message) as excinfo:
        load_tokenizer(file)
    assert str(file) in str(excinfo.value)


def test_missing_file_names_the_file(tmp_path):
    file = tmp_path / "absent.json"
    with pytest.raises(TokenizerError) as excinfo:
        load_tokenizer(file)
    assert str(file) in str(excinfo.value)


def test_from_dict_rejects_multi_character_chars():
    with pytest.raises(TokenizerError, match="not a single character"):
        tokenizer_from_dict({"kind": "char", "version": 1, "specials": list(SPECIALS), "chars": ["ab"]})


def test_char_vocab_below_bytes_and_specials_is_refused():
    with pytest.raises(TokenizerError, match="needs >= 261"):
        train_tokenizer("char", CORPUS, vocab_size=260)
    assert train_tokenizer("char", CORPUS, vocab_size=261).vocab_size == 261


def test_save_is_atomic_when_the_rename_fails(char_tok, tmp_path, monkeypatch):
    file = tmp_path / "tokenizer.json"
    file.write_text("previous tokenizer")

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.replace", failing_replace)
    with pytest.raises(OSError):
        char_tok.save(file)
    assert file.read_text() == "previous tokenizer"
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]  # no temp file left


def test_save_over_a_directory_fails_and_leaves_no_temp_file(char_tok, tmp_path):
    target = tmp_path / "tokenizer.json"
    target.mkdir()
    with pytest.raises(OSError):
        char_tok.save(target)
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"] and target.is_dir()


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"kind": "char", "version": 1, "specials": list(SPECIALS)}, "lacks the field 'chars'"),
        ({"kind": "bpe", "version": 1, "specials": list(SPECIALS)}, "lacks the field 'hf'"),
        ({"kind": "char", "version": 1, "specials": list(SPECIALS), "chars": "abc"}, "'chars' is not a list"),
        ({"kind": "bpe", "version": 1, "specials": list(SPECIALS), "hf": {"model": 3}}, "not a valid byte-level BPE"),
        (["not", "an", "object"], "expected a JSON object"),
    ],
)
def test_from_dict_with_missing_or_bad_fields_names_the_source(payload, message):
    with pytest.raises(TokenizerError, match=message) as excinfo:
        tokenizer_from_dict(payload, "ckpt/tokenizer.json")
    assert str(excinfo.value).startswith("ckpt/tokenizer.json: ")


def test_file_that_is_not_utf8_names_the_file(tmp_path):
    file = tmp_path / "latin1_tok.json"
    file.write_bytes(b'{"kind": "char", "chars": ["\xe7"]}')
    with pytest.raises(TokenizerError, match="cannot read tokenizer") as excinfo:
        load_tokenizer(file)
    assert str(file) in str(excinfo.value)

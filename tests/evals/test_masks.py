"""tatu.evals.masks against a hand-made tokenization and a naive char-by-char reference."""

import random
import unicodedata

import pytest

from tatu.evals.masks import (
    WORD_LISTS,
    is_content_word,
    is_function_word,
    token_word_mask,
)

SENTENCE = "A árvore do João é um guarda-chuva, disse-lhe à noite: 42 cães d'água!"
TEXTS = [
    SENTENCE,
    "Ele foi ao mercado pela manhã e comprou pão.\nThe cat sat on the mat, didn't it?",
    unicodedata.normalize("NFD", "Ação e coração não são da Íris."),
    "  espaços   múltiplos\t\tand tabs — travessão… «aspas» 3,14 x² São_Paulo",
]


def naive_mask(text, token_byte_lens, predicate):
    """Reference: scan characters by hand, give every byte the word its character is in."""
    n = len(text)
    word_of_char = [None] * n
    found = []
    i = 0
    while i < n:
        if not text[i].isalpha():
            i += 1
            continue
        j = i + 1
        while True:
            while j < n and (text[j].isalpha() or unicodedata.combining(text[j])):
                j += 1
            if j + 1 < n and text[j] in "'’-‐" and text[j + 1].isalpha():
                j += 2
                continue
            break
        for k in range(i, j):
            word_of_char[k] = len(found)
        found.append(text[i:j])
        i = j
    word_of_byte = []
    for ch, w in zip(text, word_of_char):
        word_of_byte.extend([w] * len(ch.encode("utf-8")))
    data = text.encode("utf-8")
    mask = []
    start = 0
    for length in token_byte_lens:
        first = start
        while first < start + length and data[first:first + 1].isspace():
            first += 1
        owner = word_of_byte[first] if first < start + length else None
        if owner is None:
            mask.append(False)
        else:
            word = unicodedata.normalize("NFC", found[owner]).casefold().replace("’", "'")
            mask.append(bool(predicate(word)))
        start += length
    return mask


def random_cuts(text, rng):
    """Token byte lengths from random cut points, mid-character cuts included."""
    size = len(text.encode("utf-8"))
    cuts = sorted(rng.sample(range(1, size), k=min(size - 1, rng.randint(1, size // 2))))
    bounds = [0] + cuts + [size]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def test_hand_made_tokenization_of_a_portuguese_sentence():
    tokens = [
        b"A", b" \xc3",            # " " + first byte of "á": the space-led token is "árvore"'s
        b"\xa1rv", b"ore",         # starts in the middle of "á", then mid-word
        b" do", b" Jo", b"\xc3\xa3o", b" ", b"\xc3\xa9", b" um",
        b" guarda", b"-ch", b"uva", b",", b" disse", b"-lhe",
        b" \xc3\xa0", b" noite", b":", b" 42", b" c\xc3\xa3es", b" d", b"'\xc3\xa1gua", b"!",
    ]
    assert b"".join(tokens) == SENTENCE.encode("utf-8")
    lens = [len(t) for t in tokens]
    function = token_word_mask(SENTENCE, lens, is_function_word)
    content = token_word_mask(SENTENCE, lens, is_content_word)
    #            A     ' \xc3' '\xa1rv' ore   do    Jo    ão    ' '    é     um
    expected_f = [True, False, False, False, True, False, False, False, True, True,
                  # guarda -ch  uva   ,      disse  -lhe   à     noite  :      42
                  False, False, False, False, False, False, True, False, False, False,
                  # cães  d      'água  !
                  False, False, False, False]
    expected_c = [False, True, True, True, False, True, True, False, False, False,
                  True, True, True, False, True, True, False, True, False, False,
                  True, True, True, False]
    assert function == expected_f
    assert content == expected_c
    assert function == naive_mask(SENTENCE, lens, is_function_word)
    assert content == naive_mask(SENTENCE, lens, is_content_word)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("category", sorted(WORD_LISTS))
def test_random_tokenizations_match_the_naive_reference(text, category):
    rng = random.Random(f"{category}:{text}")
    predicate = WORD_LISTS[category]
    for _ in range(50):
        lens = random_cuts(text, rng)
        assert token_word_mask(text, lens, predicate) == naive_mask(text, lens, predicate)
    per_byte = [1] * len(text.encode("utf-8"))
    assert token_word_mask(text, per_byte, predicate) == naive_mask(text, per_byte, predicate)


@pytest.mark.parametrize("text", TEXTS)
def test_function_and_content_are_complementary_on_word_tokens(text):
    per_byte = [1] * len(text.encode("utf-8"))
    for lens in (random_cuts(text, random.Random(7)), per_byte):
        in_word = token_word_mask(text, lens, lambda word: True)
        function = token_word_mask(text, lens, is_function_word)
        content = token_word_mask(text, lens, is_content_word)
        for w, f, c in zip(in_word, function, content):
            assert (f != c) if w else (not f and not c)
    # Byte-sized tokens include the spaces between words, which belong to no word.
    assert any(in_word) and not all(in_word)
    assert any(function) and any(content)


def test_predicate_sees_the_normalised_word():
    seen = []
    text = unicodedata.normalize("NFD", "ÁGUA D’Água")
    token_word_mask(text, [len(text.encode("utf-8"))], lambda w: seen.append(w) or True)
    assert seen == ["água", "d'água"]


def test_decomposed_accents_stay_inside_their_word():
    text = unicodedata.normalize("NFD", "à casa")  # "a" + combining grave, then " casa"
    lens = [1, 2, 5]                                # "a", the combining mark, " casa"
    assert token_word_mask(text, lens, is_function_word) == [True, True, False]


@pytest.mark.parametrize("word", ["do", "Da", "à", "ÀS", "pelo", "nós", "não", "the", "is"])
def test_function_words(word):
    assert is_function_word(word) and not is_content_word(word)


@pytest.mark.parametrize("word", ["casa", "árvore", "guarda-chuva", "disse-lhe", "cat", "João"])
def test_content_words(word):
    assert is_content_word(word) and not is_function_word(word)


def test_token_lengths_must_cover_the_text():
    with pytest.raises(ValueError, match="sum to 3 bytes but text is 4 bytes"):
        token_word_mask("casa", [1, 2], is_content_word)
    with pytest.raises(ValueError, match=r"token_byte_lens\[1\] = 0"):
        token_word_mask("casa", [4, 0], is_content_word)

"""Per-category position masks: which tokens of a text belong to words of a category.

A token belongs to the word whose UTF-8 byte span contains the token's first byte, so a token
that starts mid-word, or in the middle of a multi-byte character, counts for that word.
A token that starts with ASCII whitespace (BPE's " casa") belongs to the word its first
non-whitespace byte falls in; a token that is all whitespace, or whose first non-whitespace
byte is punctuation or a digit, belongs to no word and is masked out (False).

Words are found with the same definition as the invented-word ruler (tatu.evals.words), on the
text exactly as given (no normalisation, so byte offsets match what the tokenizer saw), and
the predicate receives the word normalised by tatu.evals.words.normalize_word (NFC, case-folded).

The built-in word lists (WORD_LISTS) need no external model: `function-words` (closed-class
words of Portuguese and English) and `content-words` (every other word). A POS tagger's output can be
plugged in as any other predicate over the word.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence

from tatu.evals.words import normalize_word, word_pattern

_ASCII_WHITESPACE = frozenset(b" \t\n\r\x0b\x0c")

_PT_FUNCTION_WORDS = """
o a os as um uma uns umas
de em por para pra pro pras pros com sem sob sobre entre até desde após ante contra perante
trás durante mediante exceto salvo
do da dos das no na nos nas ao aos à às pelo pela pelos pelas
num numa nuns numas dum duma duns dumas
dele dela deles delas nele nela neles nelas
deste desta destes destas disto neste nesta nestes nestas nisto
desse dessa desses dessas disso nesse nessa nesses nessas nisso
daquele daquela daqueles daquelas daquilo naquele naquela naqueles naquelas naquilo
àquele àquela àqueles àquelas àquilo
eu tu ele ela nós vós eles elas você vocês me te se lhe lhes vos mim ti si
comigo contigo consigo conosco convosco
meu minha meus minhas teu tua teus tuas seu sua seus suas
nosso nossa nossos nossas vosso vossa vossos vossas
este esta estes estas esse essa esses essas aquele aquela aqueles aquelas isto isso aquilo
que quem qual quais cujo cuja cujos cujas onde quanto quanta quantos quantas
e ou mas porém contudo todavia entretanto porque pois como quando embora enquanto nem
logo portanto caso conforme porquanto senão
não
é são era eram foi foram ser sido sendo sou somos és fui fomos seja sejam será serão seria
está estão estava estavam esteve estiveram estar estou estamos estando esteja estará
tem têm tinha tinham teve tiveram ter tenho temos tido tendo tenha terá teria
há havia houve haver hei hão haja haverá haveria
vai vão vou vamos ia iam
"""

_EN_FUNCTION_WORDS = """
a an the
of in on at by for with to from into onto about as than over under after before between
through during without within against among upon off out up down
and or but nor so yet if because while although though unless whether
i me my mine you your yours he him his she her hers it its we us our ours they them their
theirs myself yourself himself herself itself ourselves themselves
this that these those which who whom whose what where when how there here
is are was were be been being am
do does did done doing have has had having
will would shall should can could may might must
not no
"""

FUNCTION_WORDS: frozenset[str] = frozenset(
    normalize_word(w) for w in (_PT_FUNCTION_WORDS + _EN_FUNCTION_WORDS).split())


def is_function_word(word: str) -> bool:
    """A closed-class word of Portuguese or English (article, preposition and its
    contractions, pronoun, conjunction, auxiliary form, negation)."""
    return normalize_word(word) in FUNCTION_WORDS


def is_content_word(word: str) -> bool:
    """Any word that is not a function word (nouns, verbs, adjectives, adverbs, names)."""
    return not is_function_word(word)


# The word-list categories, named apart from the part-of-speech categories of Apertium's tags
# (tatu.data.tags.CATEGORIES, whose `function` is a tagger's closed classes, not this list):
# `tatu eval --category function-words` is this list whatever else is given.
WORD_LISTS: dict[str, Callable[[str], bool]] = {
    "function-words": is_function_word,
    "content-words": is_content_word,
}


def token_word_mask(text: str, token_byte_lens: Sequence[int],
                    predicate: Callable[[str], bool]) -> list[bool]:
    """Per token of `text`: does the word it belongs to satisfy `predicate`? (see module doc)

    `token_byte_lens` are the UTF-8 byte lengths of the tokens of `text`, in order; they must
    cover the text exactly.
    """
    words, owners = token_words(text, token_byte_lens)
    word_ok = [bool(predicate(normalize_word(match.group()))) for match in words]
    return [k is not None and word_ok[k] for k in owners]


def token_words(text: str, token_byte_lens: Sequence[int]) -> tuple[list[re.Match], list[int | None]]:
    """The words of `text` (matches, in order) and, per token, the index of the word it belongs
    to (the module doc's rule), None for a token that belongs to no word."""
    data = text.encode("utf-8")
    total = 0
    for i, n in enumerate(token_byte_lens):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"token_byte_lens[{i}] = {n!r}: every token has at least one byte")
        total += n
    if total != len(data):
        raise ValueError(f"token_byte_lens sum to {total} bytes but text is {len(data)} bytes "
                         f"in UTF-8")

    # Byte spans of the words; matches never overlap and come in order, so starts are sorted.
    words: list[re.Match] = []
    word_starts: list[int] = []
    word_ends: list[int] = []
    char_pos = byte_pos = 0
    for match in word_pattern().finditer(text):
        byte_pos += len(text[char_pos:match.start()].encode("utf-8"))
        start = byte_pos
        byte_pos += len(match.group().encode("utf-8"))
        char_pos = match.end()
        words.append(match)
        word_starts.append(start)
        word_ends.append(byte_pos)

    owners: list[int | None] = []
    token_start = 0
    for n in token_byte_lens:
        first = token_start
        token_end = token_start + n
        while first < token_end and data[first] in _ASCII_WHITESPACE:
            first += 1
        token_start = token_end
        if first == token_end:
            owners.append(None)
            continue
        k = bisect.bisect_right(word_starts, first) - 1
        owners.append(k if k >= 0 and first < word_ends[k] else None)
    return words, owners

"""The known name nearest a typed one: what every "did you mean" of tatu's variables says.

Names are compared as a person mistypes them: case and underscores do not count (`sft_ge`,
`SFTGE` and `SFT_GE` are one name), then letters are counted as edits (one added, dropped or
changed letter, or two neighbours swapped, is one edit: Damerau-Levenshtein, optimal string
alignment)."""
from __future__ import annotations

import difflib
from typing import Iterable


def folded(name: str) -> str:
    """The name without what a typo in it does not change: case and underscores."""
    return name.upper().replace("_", "")


def edits(a: str, b: str) -> int:
    """Letters added, dropped, changed or two neighbours swapped, to make `a` into `b`."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[len(b)]


def distance(typed: str, known: str) -> int:
    """Edits between two names once case and underscores are set aside."""
    return edits(folded(typed), folded(known))


def nearest(typed: str, known: Iterable[str]) -> str | None:
    """The known name a person most likely meant by `typed`: the fewest edits, then the most
    letters in common as written (difflib's ratio), then the first in order; None when even that
    one is further than a third of the name's letters (at least 2) from it: not a typo of it."""
    ranked = sorted(known, key=lambda name: (distance(typed, name),
                                             -difflib.SequenceMatcher(None, typed.upper(), name).ratio(), name))
    if not ranked:
        return None
    best = ranked[0]
    return best if distance(typed, best) <= max(2, len(folded(typed)) // 3) else None


def one_edit_from(typed: str, known: Iterable[str]) -> str | None:
    """The known name `typed` is at most one edit from (case and underscores aside), when it is
    not itself one: a name in the process environment this close is a typo, not another program's."""
    close = [name for name in known if name != typed and distance(typed, name) <= 1]
    return nearest(typed, close) if close else None

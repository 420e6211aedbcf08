"""Which sets a sweep compares and their statistics per configuration: drift (enRuler), the
sftHeld change, ptVal's change (shown, never judged: every loss is said), every held-out set of the members' data (any eval set beyond the three roles,
`tatu data build --eval ptFaq=FILE`) and the word categories of each tagged set ("sftHeld/noun",
sweep/judge/scores.py), each a change vs step 0 over seeds with its crossed CI (sweep/judge/stats.py).

The same function serves the members' ends and the common step: it reads whichever pair of
per-line score keys it is given, and a set is compared only where every member has it."""
from __future__ import annotations

from tatu.data.tags import CATEGORIES
from tatu.formats import SET_NAMES
from tatu.sweep.judge.records import MemberResult
from tatu.sweep.judge.scores import SHOWN, category_key
from tatu.sweep.judge.stats import config_stats, half_of

MIN_LINES = 2  # lines with a token of a category, for it to be compared (tatu.evals.seeds.stats.crossed_ci)


def _shared_keys(usable: list[MemberResult], base: str, end: str) -> list[str]:
    """The score keys every member has at its start and its end, in the first member's order."""
    if not usable:
        return []
    return [k for k in usable[0].lines[end] if all(k in r.lines[base] and k in r.lines[end] for r in usable)]


def held_out_sets(usable: list[MemberResult], base: str = "base", end: str = "end") -> list[str]:
    """The held-out sets every member has, by name (a cached score file keeps no other order)."""
    return sorted(k for k in _shared_keys(usable, base, end) if "/" not in k and k not in SET_NAMES)


def category_sets(usable: list[MemberResult], base: str = "base", end: str = "end") -> list[tuple[str, str]]:
    """(set, category) of the category lines every member has: sets as compared (sftHeld, enRuler,
    the held-out ones), categories in tatu.data.tags.CATEGORIES order."""
    shared = set(_shared_keys(usable, base, end))
    return [(s, c) for s in ("sftHeld", "enRuler", *held_out_sets(usable, base, end)) for c in CATEGORIES
            if category_key(s, c) in shared]


def set_stats(results: list[MemberResult], half_sft: str | None, index: int, base: str = "base", end: str = "end"
              ) -> tuple[dict, dict]:
    """({"drift", "sftHeld", held-out set: stats}, {set: {category: stats}}) of one configuration.

    sftHeld and its categories are judged on `half_sft` (the judge half after a tune stage)."""
    usable = [r for r in results if r.has(end)]
    stats = {"drift": config_stats(results, "enRuler", None, index, base, end),
             "sftHeld": config_stats(results, "sftHeld", half_sft, index, base, end)}
    shared = _shared_keys(usable, base, end)
    for name in SHOWN:  # ptVal: where every member has it (the data may not)
        if name in shared:
            stats[name] = config_stats(results, name, None, index, base, end)
    for name in held_out_sets(usable, base, end):
        stats[name] = config_stats(results, name, None, index, base, end)
    categories: dict[str, dict] = {}
    for set_name, category in category_sets(usable, base, end):
        half, key = (half_sft if set_name == "sftHeld" else None), category_key(set_name, category)
        if len(half_of(usable[0].lines[base][key], half)[2]) < MIN_LINES:
            continue  # a CI over lines needs two of them in the lines judged
        categories.setdefault(set_name, {})[category] = config_stats(results, key, half, index, base, end)
    return stats, categories

"""Per-category (part-of-speech) perplexity and bpc from the tags `tatu data build` stored.

A target token's category is that of the word it belongs to (tatu.evals.masks' rule, through
tatu.evals.sets.target_word_spans), and a word's category is that of the Apertium lexical unit
whose character span holds the word's first character (tatu.data.tags); a word no unit covers
is "unknown". Tokens of no word (spaces, punctuation, digits-only pieces are words by
masks' rule only when word_pattern says so) and special targets (EOS) belong to no category.

Per category c of a set, over the same lines as the whole-set score:

    ppl_c = exp(sum of NLL of the tokens of c / number of tokens of c)
    bpc_c = sum of NLL of the tokens of c / ln 2 / characters of the words of c

The NLLs are the per-token ones of the whole-set scoring (one forward: categories cost no
extra model call); lines without a token of c carry no information about c and are left out
of its CIs and paired comparisons (tatu.evals.scoring.compare_results).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tatu.data.tags import CATEGORIES
from tatu.evals.line_scores import LineScores
from tatu.evals.scoring import SetResult, build_result
from tatu.evals.sets import EvalSet, target_word_spans
from tatu.model.tokenizer import Tokenizer


def unit_category(units: list[list], start: int) -> str:
    """The category of the unit whose span holds character `start`; "unknown" when none does."""
    for unit_start, unit_end, category, _ in units:
        if unit_start <= start < unit_end:
            return category
    return "unknown"


def token_categories(eval_set: EvalSet, tokenizer: Tokenizer, units: Sequence[list[list]]) -> list[list[str | None]]:
    """Per line, per target token: its category, None when it belongs to no word. `units`: the
    stored tags of the set's lines, all of them (a subsample picks its lines by line_index)."""
    spans = target_word_spans(eval_set, tokenizer)
    out = []
    for index, line_spans in zip(eval_set.line_index, spans):
        line_units = units[index]
        out.append([None if span is None else unit_category(line_units, span[0]) for span in line_spans])
    return out


def word_chars(eval_set: EvalSet, tokenizer: Tokenizer, categories: list[list[str | None]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{category: (characters, UTF-8 bytes) per line} of the words of that category."""
    spans = target_word_spans(eval_set, tokenizer)
    chars = {c: np.zeros(len(eval_set.lines), dtype=np.int64) for c in CATEGORIES}
    n_bytes = {c: np.zeros(len(eval_set.lines), dtype=np.int64) for c in CATEGORIES}
    for i, (line, line_spans, line_cats) in enumerate(zip(eval_set.lines, spans, categories)):
        seen = set()
        for span, category in zip(line_spans, line_cats):
            if span is None or span in seen or category not in chars:
                continue
            seen.add(span)
            chars[category][i] += span[1] - span[0]
            n_bytes[category][i] += len(line.text[span[0]:span[1]].encode("utf-8"))
    return {c: (chars[c], n_bytes[c]) for c in CATEGORIES}


def category_lines(token_nll: Sequence[np.ndarray], categories: list[list[str | None]], category: str
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(NLL sum, token count) per line over the target tokens of `category`, from per-token NLLs."""
    masks = [np.asarray([c == category for c in line], dtype=bool) for line in categories]
    n_tokens = np.asarray([int(m.sum()) for m in masks], dtype=np.int64)
    nll = np.asarray([float(np.asarray(nll_line)[m].sum()) for nll_line, m in zip(token_nll, masks)], dtype=np.float64)
    return nll, n_tokens


def category_results(whole: SetResult, categories: list[list[str | None]], chars: dict, n_resamples: int,
                     seed: int, only: Sequence[str] = CATEGORIES) -> dict[str, SetResult]:
    """The per-category results of a set scored with per-token NLLs (score_lines(per_token=True));
    a category with no token in the set is left out."""
    token_nll = whole.scores.token_nll
    if token_nll is None:
        raise ValueError(f"{whole.name}: scored without per-token NLLs; categories need score_lines(per_token=True)")
    out = {}
    for category in only:
        nll, n_tokens = category_lines(token_nll, categories, category)
        if not n_tokens.any():
            continue
        line_chars, line_bytes = chars[category]
        scores = LineScores(nll, n_tokens, line_chars, line_bytes)
        out[category] = build_result(whole.name, whole.kind, scores, whole.line_index, whole.n_lines_total,
                                     whole.lines_sha256, whole.tokenizer_hash, category, n_resamples, seed,
                                     whole.extra, per_char=True)
    return out


def word_categories(text: str, units: list[list]) -> list[tuple[str, str]]:
    """(word, category) of every word of `text` (tatu.evals.words' word rule) under the stored units."""
    from tatu.evals.words import word_pattern

    return [(m.group(), unit_category(units, m.start())) for m in word_pattern().finditer(text)]

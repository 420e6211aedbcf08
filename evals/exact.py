"""Answers right (exact match): the statistics of a share of items answered right, for one run and
over seeds. Torch-free: the daemon, the sweep and a notebook read the same numbers.

One run: the rate over its n items with a Wilson 95% interval (evals/downstream.wilson_interval),
and its change vs step 0 over the same items by the exact McNemar test (evals/choice.mcnemar_exact).

Over seeds, every seed answers the SAME items: the design is crossed, seeds x items, as it is for
perplexity over shared lines (evals/seeds/stats.py). Per item i and seed s, y_si (1 right, 0 wrong;
or a difference of two such) is mu + a_s (the seed) + b_i (the item: an easy or a hard question,
the same for every seed) + e_si, and the mean over S seeds of L items varies by
    Var = sigma_a^2 / S + sigma_b^2 / L + sigma_e^2 / (S L).
For a mean the two-way ANOVA gives the parts exactly, no resampling needed:
    MS_seed = L * var_s(seed means),  MS_item = S * var_i(item means),
    MS_resid = sum (y_si - seed mean - item mean + grand mean)^2 / ((S - 1)(L - 1)),
    E[MS_seed] = sigma_e^2 + L sigma_a^2,  E[MS_item] = sigma_e^2 + S sigma_b^2,  E[MS_resid] = sigma_e^2,
each part estimated from them and kept at least 0, on the scale and in the CrossedParts form
crossed_ci uses (so power.py projects it to other seed counts), with Satterthwaite's df.

  crossed_mean    the mean of any per-(seed, item) value: a t interval, mean +- t_df * SE. For a
                  change vs step 0 (end - base, in {-1, 0, 1}) and for a difference between two
                  configurations paired by seed and item (paired_difference).
  crossed_rate    a rate (values 0/1), whose interval must stay in [0, 1] and mean something at 0
                  right: Wilson's interval at the effective number of items, n_eff = p(1 - p) / Var
                  (at most S L: seeds and items can only add variance to independent answers),
                  shrunk by (z / t_df)^2 for the df of Var -- Korn & Graubard's (1998) interval for a
                  proportion from a clustered design, with Wilson's in place of Clopper-Pearson's.
                  At 0 or S L right (Var 0) it is Wilson's over all S L answers, as if independent:
                  the narrowest the data allow, never the point a t interval would collapse to.

A rate's lower bound is above 0 as soon as one answer is right (no rate of 0 answers anything):
"lo > 0" says little. Whether the answers improved is the change's CI: crossed_mean of end - base.

Checked against a naive double loop in exact fractions and by simulation (coverage):
tests/evals/test_exact.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from tatu.evals.downstream import wilson_interval
from tatu.evals.seeds.power import CrossedParts, crossed_mde
from tatu.evals.seeds.stats import SeedCI, crossed_p
from scipy.special import stdtrit  # Student's t quantile: stdtrit(df, p)


@dataclass(frozen=True)
class RunRate:
    """One run's share of items answered right, with its Wilson 95% interval."""

    value: float
    lo: float
    hi: float
    n: int
    n_correct: int


def run_rate(correct, level: float = 0.95) -> RunRate:
    correct = _bool_vector(correct, "correct")
    n, k = int(correct.size), int(correct.sum())
    lo, hi = wilson_interval(k, n, level)
    return RunRate(k / n, lo, hi, n, k)


@dataclass(frozen=True)
class CrossedRate:
    """The mean over seeds of each seed's share of the same items answered right: the rate, its
    interval (Wilson at n_eff: module doc), n_eff, and the crossed parts it came from (`crossed`:
    the mean's t interval, SE, df, seed SD, ...)."""

    value: float
    lo: float
    hi: float
    n_seeds: int
    n_items: int
    n_eff: float
    crossed: SeedCI


def _bool_vector(values, what: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{what}: expected a non-empty sequence of right/wrong answers, got shape {array.shape}")
    if array.dtype != bool and not np.isin(array, (0, 1)).all():
        raise ValueError(f"{what}: every answer is right (1) or wrong (0)")
    return array.astype(bool)


def _matrix(values, what: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 2:
        raise ValueError(f"{what}: expected seeds x items (at least 1 seed and 2 items), got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{what}: every value must be finite")
    return array


def crossed_mean(values, level: float = 0.95) -> SeedCI:
    """CI of the mean over seeds (rows) of each seed's mean over the same items (columns): the
    crossed design of the module doc, exact mean squares. One seed: the t interval over items."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1, got {level!r}")
    y = _matrix(values, "values")
    n_seeds, n_items = y.shape
    seed_means, item_means = y.mean(axis=1), y.mean(axis=0)
    mean = float(y.mean())
    # On the scale of the mean (what crossed_ci's parts are): each mean square over S L.
    if n_seeds > 1:
        seed_ms = float(seed_means.var(ddof=1)) / n_seeds
        resid = y - seed_means[:, None] - item_means[None, :] + mean
        inter_ms = float((resid ** 2).sum()) / ((n_seeds - 1) * (n_items - 1)) / (n_seeds * n_items)
    else:
        seed_ms = inter_ms = 0.0
    line_ms = float(item_means.var(ddof=1)) / n_items
    # the seed part unfloored, as crossed_ci's (evals/seeds/stats.py): its mean square keeps S - 1 df
    seed_part, line_part = seed_ms - inter_ms, max(0.0, line_ms - inter_ms)
    parts = CrossedParts(seed=seed_part * n_seeds, interaction=inter_ms * n_seeds, lines=line_part, n_lines=n_items)
    variance, df = parts.variance(n_seeds), parts.df(n_seeds)
    se = math.sqrt(variance)
    half = float(stdtrit(df, 0.5 + level / 2.0)) * se
    within = float(np.mean(y.var(axis=1, ddof=1))) / n_items  # each seed's own SE^2 over its items
    return SeedCI(
        mean=mean, lo=mean - half, hi=mean + half, se=se,
        seed_sd=math.sqrt(float(seed_means.var(ddof=1))) if n_seeds > 1 else 0.0,
        seed_effect_sd=math.sqrt(max(0.0, seed_part) * n_seeds), within_se=math.sqrt(within),
        shared_line_se=math.sqrt(line_part), interaction_se=math.sqrt(inter_ms), df=df, n_seeds=n_seeds,
        mde=crossed_mde(parts, n_seeds) if n_seeds > 1 else math.inf, parts=parts if n_seeds > 1 else None,
        p_value=crossed_p(mean, se, df),
    )


def crossed_rate(correct, level: float = 0.95) -> CrossedRate:
    """The mean rate over seeds (rows) of the same items (columns) answered right, with the
    interval of the module doc (inside [0, 1], informative at 0 and at every answer right)."""
    y = _matrix(correct, "correct")
    if not np.isin(y, (0.0, 1.0)).all():
        raise ValueError("correct: every answer is right (1) or wrong (0)")
    crossed = crossed_mean(y, level)
    n = y.size
    p = crossed.mean
    variance = crossed.se ** 2
    n_eff = float(n) if variance == 0.0 or p in (0.0, 1.0) else min(float(n), p * (1.0 - p) / variance)
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    if math.isfinite(crossed.df):
        n_eff *= (z / float(stdtrit(crossed.df, 0.5 + level / 2.0))) ** 2
    lo, hi = _wilson(p, n_eff, z)
    return CrossedRate(p, lo, hi, y.shape[0], y.shape[1], n_eff, crossed)


def _wilson(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's score interval for a share p of n (n need not be whole); exactly 0 / 1 at the ends."""
    z2n = z * z / n
    centre = (p + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n))
    return (0.0 if p == 0.0 else max(0.0, centre - half)), (1.0 if p == 1.0 else min(1.0, centre + half))


def paired_difference(config, baseline, level: float = 0.95) -> SeedCI:
    """config minus baseline, paired by seed (row) and item (column): the crossed CI of the mean
    difference. Rows are seeds in the same order in both (the same TATU_SEED draws the same data
    order); columns the same items."""
    a, b = _matrix(config, "config"), _matrix(baseline, "baseline")
    if a.shape != b.shape:
        raise ValueError(f"config is {a.shape[0]} seeds x {a.shape[1]} items but baseline {b.shape[0]} x {b.shape[1]}: "
                         f"pair them by seed and item")
    return crossed_mean(a - b, level)

"""tatu.evals.exact: answers right over seeds x items, against a naive two-way ANOVA in exact
fractions (the same numbers), and by simulation (the intervals cover; the naive ones that ignore
the crossing do not)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.stats

from tatu.evals.downstream import wilson_interval
from tatu.evals.exact import crossed_mean, crossed_rate, paired_difference, run_rate


def naive_crossed(rows: list[list[int]]):
    """(mean, Var of the mean, Satterthwaite df) of a seeds x items table by the textbook two-way
    random-effects ANOVA without replication, one cell at a time in exact fractions."""
    S, L = len(rows), len(rows[0])
    y = [[Fraction(v) for v in row] for row in rows]
    grand = sum(sum(row) for row in y) / (S * L)
    seed_mean = [sum(row) / L for row in y]
    item_mean = [sum(y[s][i] for s in range(S)) / S for i in range(L)]
    ms_item = S * sum((m - grand) ** 2 for m in item_mean) / (L - 1)
    if S == 1:
        return grand, ms_item / L, L - 1  # one seed: the items' own t interval
    ms_seed = L * sum((m - grand) ** 2 for m in seed_mean) / (S - 1)
    ms_resid = sum((y[s][i] - seed_mean[s] - item_mean[i] + grand) ** 2
                   for s in range(S) for i in range(L)) / ((S - 1) * (L - 1))
    # the seed part unfloored (its mean square is Var's seed term, unbiased); the items' part at least 0
    sigma_a2 = (ms_seed - ms_resid) / L
    sigma_b2 = max(Fraction(0), (ms_item - ms_resid) / S)
    var = sigma_a2 / S + sigma_b2 / L + ms_resid / (S * L)
    # Satterthwaite over the expected mean squares (each over S L) with their df: the seed one at least
    # the residual's (sigma_a^2 >= 0), so a seed part measured at or below 0 keeps its S - 1 df,
    # and the smaller df of it at its estimate and at its 65% upper confidence limit
    # (evals/seeds/power.SEED_UCL_LEVEL: a chance agreement of the seeds buys no df)
    dfs = []
    for factor in (Fraction(1), Fraction((S - 1) / scipy.stats.chi2.ppf(0.35, S - 1))):
        terms = [(max(ms_seed * factor, ms_resid), S - 1)]
        if sigma_b2 > 0:
            terms += [(ms_item, L - 1), (-ms_resid, (S - 1) * (L - 1))]
        total = sum(c for c, _ in terms)
        spread = sum((c / (S * L)) ** 2 / df for c, df in terms if c != 0)
        dfs.append((total / (S * L)) ** 2 / spread if spread else math.inf)
    return grand, var, min(dfs)


def latent(rng, n_seeds, n_items, mu, sd_seed, sd_item, sd_noise, item_effects=None, seed_effects=None):
    a = rng.normal(0, sd_seed, n_seeds) if seed_effects is None else seed_effects
    b = rng.normal(0, sd_item, n_items) if item_effects is None else item_effects
    return (mu + a[:, None] + b[None, :] + rng.normal(0, sd_noise, (n_seeds, n_items)) > 0).astype(int)


@pytest.mark.parametrize("n_seeds, n_items, sd_seed, sd_item, seed", [
    (3, 40, 0.8, 1.5, 0),   # both parts measured
    (5, 25, 0.0, 1.5, 1),   # no seed effect: its part clamps to 0
    (3, 30, 1.2, 0.0, 2),   # no item effect: the items' part clamps to 0
    (1, 50, 0.0, 1.0, 3),   # one seed
])
def test_crossed_mean_equals_the_naive_anova(n_seeds, n_items, sd_seed, sd_item, seed):
    rng = np.random.default_rng(seed)
    y = latent(rng, n_seeds, n_items, -0.3, sd_seed, sd_item, 1.0)
    mean, var, df = naive_crossed(y.tolist())
    ci = crossed_mean(y)
    assert ci.mean == pytest.approx(float(mean), abs=1e-12)
    assert ci.se == pytest.approx(math.sqrt(var), rel=1e-9)
    assert ci.df == pytest.approx(float(df), rel=1e-9)
    half = scipy.stats.t.ppf(0.975, float(df)) * math.sqrt(var)
    assert (ci.lo, ci.hi) == pytest.approx((float(mean) - half, float(mean) + half), rel=1e-7, abs=1e-9)
    assert ci.p_value == pytest.approx(2 * scipy.stats.t.sf(abs(float(mean)) / math.sqrt(var), float(df)), rel=1e-6)
    if n_seeds > 1 and sd_item > 0:
        # the check has teeth: where the shared items vary, the two plausible shortcuts give other
        # SEs on the same table (with no item part, the seeds-only SE is the crossed one, exactly)
        seeds_only = float(np.std(y.mean(axis=1), ddof=1)) / math.sqrt(n_seeds)
        pooled = math.sqrt(float(mean) * (1 - float(mean)) / y.size)
        assert abs(seeds_only - math.sqrt(var)) > 1e-3 and abs(pooled - math.sqrt(var)) > 1e-3


def test_run_rate_is_wilsons():
    correct = [1, 0, 0, 1, 0, 0, 0, 0, 1, 0]
    rate = run_rate(correct)
    ref = scipy.stats.binomtest(3, 10).proportion_ci(confidence_level=0.95, method="wilson")
    assert (rate.value, rate.n, rate.n_correct) == (0.3, 10, 3)
    assert (rate.lo, rate.hi) == pytest.approx((ref.low, ref.high), abs=1e-12)
    with pytest.raises(ValueError, match="right \\(1\\) or wrong \\(0\\)"):
        run_rate([1, 2])
    with pytest.raises(ValueError, match="non-empty"):
        run_rate([])


def test_crossed_rate_at_none_and_all_right_is_wilsons_over_every_answer():
    none_right, all_right = crossed_rate(np.zeros((3, 64))), crossed_rate(np.ones((3, 64)))
    assert (none_right.lo, none_right.hi) == pytest.approx(wilson_interval(0, 192), abs=1e-12)
    assert (all_right.lo, all_right.hi) == pytest.approx(wilson_interval(192, 192), abs=1e-12)
    assert none_right.hi > 0.01  # never the zero-width point a t interval would give


def test_crossed_rate_is_wilson_at_the_effective_count():
    rng = np.random.default_rng(5)
    y = latent(rng, 3, 64, -0.8, 0.5, 1.5, 1.0)
    mean, var, df = naive_crossed(y.tolist())
    p, var, df = float(mean), float(var), float(df)
    z, t = scipy.stats.norm.ppf(0.975), scipy.stats.t.ppf(0.975, df)
    n_eff = min(y.size, p * (1 - p) / var) * (z / t) ** 2
    centre = (p + z * z / (2 * n_eff)) / (1 + z * z / n_eff)
    half = z / (1 + z * z / n_eff) * math.sqrt(p * (1 - p) / n_eff + z * z / (4 * n_eff ** 2))
    rate = crossed_rate(y)
    assert rate.n_eff == pytest.approx(n_eff, rel=1e-9) and n_eff < y.size / 2  # the shared items count
    assert (rate.lo, rate.hi) == pytest.approx((centre - half, centre + half), rel=1e-9)
    assert 0 < rate.lo < p < rate.hi < 1


def coverage(simulate, interval, truth, n_experiments, seed):
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(n_experiments):
        lo, hi = interval(simulate(rng))
        hits += lo <= truth <= hi
    return hits / n_experiments


def test_crossed_rate_covers_the_rate_over_seeds_and_items_where_a_pooled_wilson_does_not():
    """3 seeds x 64 items, items of very different difficulty (the demo's shape): the true rate
    is P(mu + a + b + e > 0) over new seeds AND new items."""
    mu, sd_seed, sd_item, sd_noise = -1.0, 0.3, 1.5, 0.7
    truth = scipy.stats.norm.cdf(mu / math.sqrt(sd_seed ** 2 + sd_item ** 2 + sd_noise ** 2))

    def simulate(rng):
        return latent(rng, 3, 64, mu, sd_seed, sd_item, sd_noise)

    def crossed(y):
        r = crossed_rate(y)
        return r.lo, r.hi

    def pooled(y):
        return wilson_interval(int(y.sum()), y.size)

    ours = coverage(simulate, crossed, truth, 2000, 11)
    naive = coverage(simulate, pooled, truth, 2000, 11)
    assert 0.92 <= ours <= 0.99, ours
    assert naive < 0.80, naive  # answers of one item are not independent draws: far too narrow


def test_change_and_paired_difference_cover_and_pairing_by_seed_matters():
    """A change vs step 0 and a difference between configurations: crossed_mean of the per-(seed,
    item) differences. Each seed's data order helps or hurts both configurations alike (a shared
    seed effect), each item is as hard for both: paired by seed and item, the interval covers the
    true difference; pairing seeds wrongly widens it."""
    S, L = 3, 64
    sd_seed, sd_item, sd_noise = 0.8, 1.5, 0.7
    total = math.sqrt(sd_seed ** 2 + sd_item ** 2 + sd_noise ** 2)
    mu_base, mu_config = -1.2, -0.9
    truth = scipy.stats.norm.cdf(mu_config / total) - scipy.stats.norm.cdf(mu_base / total)

    def simulate(rng):
        a, b = rng.normal(0, sd_seed, S), rng.normal(0, sd_item, L)
        return (latent(rng, S, L, mu_config, 0, 0, sd_noise, b, a), latent(rng, S, L, mu_base, 0, 0, sd_noise, b, a))

    def paired(pair):
        ci = paired_difference(*pair)
        return ci.lo, ci.hi

    assert 0.92 <= coverage(simulate, paired, truth, 1500, 21) <= 0.995

    rng = np.random.default_rng(4)
    config, base = simulate(rng)
    right = paired_difference(config, base)
    mean, var, _ = naive_crossed((config - base).tolist())
    assert right.mean == pytest.approx(float(mean)) and right.se == pytest.approx(math.sqrt(var))
    wrong = paired_difference(config, base[[1, 2, 0]])  # seeds paired with another seed's run
    assert wrong.mean == pytest.approx(right.mean) and wrong.se > right.se
    with pytest.raises(ValueError, match="pair them by seed and item"):
        paired_difference(config, base[:2])

"""evals/seeds/skew.py (Hall's transformation, the outward-only bounds) and what crossed_ci feeds it
(line_changes, line_third, the skew-aware p) against independent computations: scipy's t and kstat,
a bisection for the inverse, finite differences for the delta method, loops for the k-statistic.
The error rates these bounds reach: tests/evals/test_seeds_crossed.py (one-sided coverage)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp

from tatu.evals.seeds import skew
from tatu.evals.seeds import stats as seeds


def _inverse_by_bisection(u: float, gamma: float) -> float:
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if skew.hall(mid, gamma) < u else (lo, mid)
    return 0.5 * (lo + hi)


@pytest.mark.parametrize("gamma", [-0.9, -0.2, 0.0, 0.05, 0.4, 1.5])
def test_hall_is_increasing_and_its_inverse_is_the_bisections(gamma):
    t = np.linspace(-12, 12, 2001)
    g = np.array([skew.hall(float(x), gamma) for x in t])
    assert np.all(np.diff(g) >= -1e-12)  # g'(t) = (1 + gamma t / 3)^2 >= 0
    for u in (-6.0, -2.1, -0.3, 0.0, 1.0, 4.3):
        assert skew.hall_inverse(u, gamma) == pytest.approx(_inverse_by_bisection(u, gamma), abs=1e-7)
        assert skew.hall(skew.hall_inverse(u, gamma), gamma) == pytest.approx(u, abs=1e-9)


def test_the_bounds_only_move_outwards_and_the_skew_lengthens_its_own_side():
    q = 2.776
    assert skew.upper_factor(q, 0.0) == q and skew.lower_factor(q, 0.0) == q
    right = 0.3  # right-skewed mean: the upper bound moves out, the lower one stays at the t bound
    assert skew.upper_factor(q, right) > q and skew.lower_factor(q, right) == q
    assert skew.upper_factor(q, right) == pytest.approx(-_inverse_by_bisection(-q, right), abs=1e-7)
    assert skew.lower_factor(q, -right) > q and skew.upper_factor(q, -right) == q  # mirrored
    assert skew.lower_factor(q, -right) == pytest.approx(skew.upper_factor(q, right), rel=1e-12)
    assert skew.upper_factor(math.inf, right) == math.inf


@pytest.mark.parametrize("gamma", [0.0, 0.35, -0.35])
@pytest.mark.parametrize("df", [2.0, 4.5, 60.0])
def test_the_decisions_are_the_bounds_computed_with_scipy(df, gamma):
    """upper_below / lower_above (decided through stdtr) against the bound built from scipy's t
    quantile and a bisection for Hall's inverse, on both sides of the bound."""
    for level in (0.975, 0.9993):
        q = float(sp.t.ppf(level, df))
        up = max(q, -_inverse_by_bisection(-q, gamma))
        down = max(q, _inverse_by_bisection(q, gamma))
        for step in (-1e-3, 1e-3):
            statistic = up * (1 + step)
            assert skew.upper_below(statistic, df, level, gamma) == (statistic > up)
            statistic = -down * (1 + step)
            assert skew.lower_above(statistic, df, level, gamma) == (-statistic > down)
    assert not skew.upper_below(50.0, df, 1.0, gamma)  # nothing to spend: never a pass


def test_k_statistic_is_scipys_kstat():
    rng = np.random.default_rng(3)
    for n in (3, 7, 166):
        x = rng.gamma(0.5, 1.0, n)
        assert skew.k_statistic_3(x) == pytest.approx(sp.kstat(x, 3), rel=1e-10)
    assert skew.k_statistic_3([1.0, 2.0]) == 0.0


def _ratio_statistic(run: seeds.RunLines, weights: np.ndarray) -> float:
    """The run's log ratio with each line counted `weights` times (by hand: sums over the lines)."""
    end = (weights * run.nll_end).sum() / (weights * run.tok_end).sum()
    base = (weights * run.nll_base).sum() / (weights * run.tok_base).sum()
    return float(end - base)


def test_line_changes_are_the_delta_method_by_finite_differences():
    rng = np.random.default_rng(4)
    n_lines = 30
    tok_b, tok_e = rng.integers(1, 6, n_lines).astype(float), rng.integers(1, 6, n_lines).astype(float)
    runs = [seeds.RunLines(tok_b * rng.uniform(2, 4, n_lines), tok_b, tok_e * rng.uniform(2, 4, n_lines), tok_e)
            for _ in range(3)]
    changes = seeds.line_changes(runs)
    eps = 1e-6
    for s, run in enumerate(runs):
        assert changes[s].mean() == pytest.approx(run.log_ratio(), abs=1e-12)  # a row's mean: the run's statistic
        ones = np.ones(n_lines)
        for i in (0, 7, 29):
            bumped = ones.copy()
            bumped[i] += eps
            # d t / d w_i * L is line i's influence: changes[s, i] - t_s
            influence = (_ratio_statistic(run, bumped) - _ratio_statistic(run, ones)) / eps * n_lines
            assert changes[s, i] - run.log_ratio() == pytest.approx(influence, rel=1e-4, abs=1e-8)
    paired = seeds.line_changes(runs[:2], runs[1:])
    assert np.allclose(paired, changes[:2] - changes[1:])


def test_crossed_ci_line_third_is_the_k_statistic_of_the_line_means_by_loops():
    rng = np.random.default_rng(5)
    n_seeds, n_lines = 4, 60
    change = 0.3 * rng.gamma(0.5, 1.0, (1, n_lines)) + 0.05 * rng.standard_normal((n_seeds, n_lines))
    ones, base = np.ones(n_lines), np.full(n_lines, 3.0)
    ci = seeds.crossed_ci([seeds.RunLines(base, ones, base + row, ones) for row in change], n_resamples=500)
    means = [sum(change[s][i] for s in range(n_seeds)) / n_seeds for i in range(n_lines)]
    centre = sum(means) / n_lines
    k3 = n_lines / ((n_lines - 1) * (n_lines - 2)) * sum((m - centre) ** 3 for m in means)
    assert ci.line_third == pytest.approx(k3 / n_lines ** 2, rel=1e-9)
    sd = math.sqrt(sum((m - centre) ** 2 for m in means) / (n_lines - 1))
    assert ci.line_skew == pytest.approx(k3 / sd ** 3, rel=1e-9)
    # the bounds' gamma: the mean's skewness from the lines, counted SKEW_INFLATION times
    assert ci.skew == pytest.approx(skew.SKEW_INFLATION * ci.line_third / ci.se ** 3, rel=1e-12) and ci.skew > 0
    # the interval is Hall's, moved outwards only: the upper side (the skew's) is the longer one
    q = float(sp.t.ppf(0.975, ci.df))
    assert ci.hi - ci.mean == pytest.approx(max(q, -_inverse_by_bisection(-q, ci.skew)) * ci.se, rel=1e-6)
    assert ci.mean - ci.lo == pytest.approx(q * ci.se, rel=1e-6)


def _naive_p(mean: float, se: float, df: float, gamma: float) -> float:
    """The two-sided p the skew-aware interval implies, by scipy and a bisection: the smallest
    1 - level at which the interval [mean - max(q, g^-1(q)) se, mean + max(q, -g^-1(-q)) se] still
    holds 0, found by bisection on the level."""
    lo_level, hi_level = 0.5, 1.0 - 1e-15
    for _ in range(100):
        level = 0.5 * (lo_level + hi_level)
        q = float(sp.t.ppf(level, df))
        low = mean - max(q, _inverse_by_bisection(q, gamma)) * se
        high = mean + max(q, -_inverse_by_bisection(-q, gamma)) * se
        lo_level, hi_level = (level, hi_level) if (low > 0 or high < 0) else (lo_level, level)
    return 2 * (1 - 0.5 * (lo_level + hi_level))


@pytest.mark.parametrize("mean,gamma", [(0.03, 0.0), (0.03, 0.4), (-0.03, 0.4), (0.01, -0.7), (0.0, 0.2)])
def test_the_p_is_the_level_at_which_the_interval_reaches_zero(mean, gamma):
    got = seeds.crossed_p(mean, 0.012, 3.7, gamma)
    assert got == pytest.approx(_naive_p(mean, 0.012, 3.7, gamma), rel=1e-5, abs=1e-9)
    if gamma == 0.0:
        assert got == pytest.approx(2 * sp.t.sf(abs(mean) / 0.012, 3.7), rel=1e-9)

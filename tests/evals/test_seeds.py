"""evals/seeds.py against independent computations: scipy for t and the paired test, a hand
computation for Holm, and simulated sweeps with a known seed and line variance for the
hierarchical bootstrap's coverage."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp

from tatu.evals import seeds


def test_t_distribution_matches_scipy():
    for df in (1, 2, 3, 4.5, 9, 30, 200):
        for t in (-8.0, -2.1, -0.3, 0.0, 0.7, 1.96, 4.0):
            assert seeds.t_cdf(t, df) == pytest.approx(sp.t.cdf(t, df), abs=1e-10)
        for p in (0.001, 0.025, 0.2, 0.5, 0.8, 0.975):
            assert seeds.t_ppf(p, df) == pytest.approx(sp.t.ppf(p, df), rel=1e-8, abs=1e-9)


def test_paired_t_matches_scipy_ttest_rel():
    rng = np.random.default_rng(3)
    for n in (2, 3, 5, 12):
        a = rng.normal(0.1, 1.0, n)
        b = a + rng.normal(0.3, 0.5, n)
        ours = seeds.paired_t(b, a)
        ref = sp.ttest_rel(b, a)
        assert ours.t == pytest.approx(ref.statistic, rel=1e-10)
        assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-8)
        assert ours.df == n - 1 and ours.mean_diff == pytest.approx(float(np.mean(b - a)))
    # A clear difference is found; identical values are no evidence at all.
    assert seeds.paired_t([1.0, 2.0, 3.0, 4.0], [0.0, 1.1, 1.9, 3.0]).p_value < 0.001
    assert seeds.paired_t([1.0, 2.0], [1.0, 2.0]).p_value == 1.0
    with pytest.raises(ValueError, match="at least 2 seeds"):
        seeds.paired_t([1.0], [2.0])


def test_holm_by_hand():
    # p sorted: 0.01 (x4 = 0.04), 0.02 (x3 = 0.06), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> 0.06 monotone)
    assert seeds.holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert seeds.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert seeds.holm([0.9, 0.3]) == pytest.approx([0.9, 0.6])  # 0.3 x 2; 0.9 x 1
    assert seeds.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # 0.8 x 2 capped at 1; monotone
    assert seeds.holm([0.4, 0.4, 0.4]) == pytest.approx([1.0, 1.0, 1.0])  # capped at 1
    with pytest.raises(ValueError):
        seeds.holm([1.2])


def test_robust_z_flags_the_far_seed_and_only_it():
    values = [0.10, 0.11, 0.09, 0.105, 0.60]
    median = np.median(values)
    mad = np.median(np.abs(np.array(values) - median))
    assert seeds.robust_z(values) == pytest.approx(list((np.array(values) - median) / (1.4826 * mad)))
    assert seeds.outliers(values) == [4]
    assert seeds.outliers([0.10, 0.11, 0.09, 0.105, 0.12]) == []
    assert seeds.outliers([0.1, 0.1, 0.1]) == [] and seeds.outliers([0.1, 5.0]) == []


def test_seeds_mde_and_seeds_needed():
    # (t_.975 + t_.8, df 4) * sd / sqrt(5)
    expected = (sp.t.ppf(0.975, 4) + sp.t.ppf(0.8, 4)) * 0.02 / math.sqrt(5)
    assert seeds.seeds_mde(0.02, 5) == pytest.approx(expected, rel=1e-8)
    n = seeds.seeds_needed(0.03, 0.02)
    assert seeds.seeds_mde(0.02, n) <= 0.03 < seeds.seeds_mde(0.02, n - 1)


def test_run_lines_log_ratio_is_the_paired_corpus_log_ratio():
    run = seeds.RunLines(np.array([2.0, 4.0]), np.array([1, 3]), np.array([3.0, 5.0]), np.array([1, 3]))
    assert run.log_ratio() == pytest.approx(8 / 4 - 6 / 4)
    with pytest.raises(ValueError, match="same lines"):
        seeds.RunLines(np.ones(2), np.ones(2), np.ones(3), np.ones(3))


def _synthetic_sweep(rng, n_seeds, n_lines, seed_sd, line_sd):
    """Per-line NLL (1 token a line) = the seed's effect + line noise; the truth is 0."""
    effects = seed_sd * rng.standard_normal(n_seeds)
    runs = []
    for s in range(n_seeds):
        base = np.full(n_lines, 3.0)
        end = base + effects[s] + line_sd * rng.standard_normal(n_lines)
        runs.append(seeds.RunLines(base, np.ones(n_lines), end, np.ones(n_lines)))
    return runs


def _coverage(n_sims, n_seeds, seed_sd, line_sd, naive=False, n_lines=40):
    rng = np.random.default_rng(11)
    covered = 0
    for k in range(n_sims):
        runs = _synthetic_sweep(rng, n_seeds, n_lines, seed_sd, line_sd)
        est = [r.log_ratio() for r in runs]
        reps = [seeds.line_replicates([r], 300, rng)[0] for r in runs]
        if naive:  # lines only: pool the seeds' line replicates, ignore the seed spread
            pooled = np.mean(reps, axis=0)
            lo, hi = np.quantile(pooled, [0.025, 0.975])
        else:
            ci = seeds.hierarchical_ci(est, reps, n_resamples=600, seed=k)
            lo, hi = ci.lo, ci.hi
        covered += lo <= 0.0 <= hi
    return covered / n_sims


@pytest.mark.slow
@pytest.mark.parametrize("seed_sd,line_sd", [(0.05, 0.05), (0.05, 0.6), (0.0, 0.3)],
                         ids=["seed-dominated", "line-dominated", "no-seed-variance"])
def test_hierarchical_bootstrap_covers_at_about_the_stated_rate(seed_sd, line_sd):
    # 5 seeds x 40 lines; line SE = line_sd / sqrt(40). 200 simulated sweeps: a true 95%
    # interval covers 190 +- 6 (binomial SD 3); the bound fails an interval off by ~7 points.
    coverage = _coverage(200, 5, seed_sd, line_sd)
    print(f"coverage seed_sd={seed_sd} line_sd={line_sd}: {coverage:.3f}")
    assert 0.90 <= coverage <= 0.99, coverage


@pytest.mark.slow
def test_the_coverage_check_fails_an_interval_that_ignores_seed_variance():
    # The other direction: a CI from lines alone misses the seed spread and is caught.
    assert _coverage(200, 5, 0.05, 0.05, naive=True) < 0.80


def test_hierarchical_ci_decomposes_the_variance():
    rng = np.random.default_rng(5)
    runs = _synthetic_sweep(rng, 8, 200, 0.2, 0.1)  # seed SD 0.2 >> line SE 0.007
    est = [r.log_ratio() for r in runs]
    reps = [seeds.line_replicates([r], 500, rng)[0] for r in runs]
    ci = seeds.hierarchical_ci(est, reps)
    assert ci.seed_sd == pytest.approx(np.std(est, ddof=1))
    assert ci.within_se == pytest.approx(0.1 / math.sqrt(200), rel=0.2)
    assert ci.seed_effect_sd == pytest.approx(math.sqrt(ci.seed_sd ** 2 - ci.within_se ** 2))
    assert ci.lo < ci.mean < ci.hi and ci.mean == pytest.approx(np.mean(est))
    # Seed-dominated: close to the t interval over seeds.
    t_half = sp.t.ppf(0.975, 7) * np.std(est, ddof=1) / math.sqrt(8)
    assert (ci.hi - ci.lo) / 2 == pytest.approx(t_half, rel=0.25)
    # Same inputs, same numbers.
    assert seeds.hierarchical_ci(est, reps) == ci


def test_paired_line_replicates_cancel_the_shared_line_difficulty():
    rng = np.random.default_rng(2)
    difficulty = rng.gamma(2.0, 2.0, 100)
    base = seeds.RunLines(difficulty, np.ones(100), difficulty * 1.10, np.ones(100))
    other = seeds.RunLines(difficulty, np.ones(100), difficulty * 1.12, np.ones(100))
    a, b = seeds.line_replicates([base, other], 400, np.random.default_rng(0))
    alone = seeds.line_replicates([other], 400, np.random.default_rng(1))[0]
    assert np.std(b - a) < 0.5 * np.std(alone - np.mean(alone) + np.mean(a) - a)

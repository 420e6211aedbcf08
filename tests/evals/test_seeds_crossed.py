"""evals/seeds/stats.py's crossed-design CI (seeds x shared lines) against an independent two-way
ANOVA written here with loops, and its coverage on simulated sweeps whose lines carry an effect
shared by every seed plus a seed x line interaction. A lines-independent CI (the hierarchical
bootstrap tatu used before, kept below as a test-local reference) fails the same coverage test.

Each one-sided level is asserted on its own (the criteria a sweep judges are one-sided: a false pass
at the threshold is the upper bound's miss), on normal and on skewed or heavy-tailed parts (a few
lines forgotten far more than the rest), in the closed form at thousands of sweeps and through
crossed_ci itself (slow). Measured coverage per regime (printed with -s; docs/sweeps.md quotes it):
    .venv/bin/pytest -q -s tests/evals/test_seeds_crossed.py -k coverage
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pytest
from scipy import stats as sp

from tatu.evals.seeds import skew, stats as seeds
from tatu.evals.seeds.sequential import fixed_pass
from tatu.evals.seeds.simulate import Effects, Shape, anova_estimates, crossed_data

N_LINES = 40
N_SIMS = 400  # the lines-independent CI's failure is far below the band at this count
# The crossed CI's coverage: at 4000 sweeps a rate near 95% has a Monte-Carlo SE of about 0.35 points,
# so the band [92%, 97%] stays at least 3 SEs from every measured cell (the test checks that too).
COVERAGE_SIMS = 4000
COVERAGE_LOW, COVERAGE_HIGH = 0.92, 0.97
# no seed variance: S seeds cannot tell 0 from a small one, so it over-covers by design; skewed lines:
# the bound on the skew's side moves out and the other keeps its t bound (evals/seeds/skew.py)
CONSERVATIVE = {"neither", "skewed-lines"}
# (seed SD, shared-line SD, seed x line SD) of the per-line log-NLL change, one token a line on average
REGIMES = {
    "seed-dominated": (0.10, 0.05, 0.05),
    "shared-line-dominated": (0.005, 0.5, 0.1),
    "both": (0.10, 0.4, 0.2),
    "neither": (0.0, 0.0, 0.3),
    # the shared lines right-skewed (skewness 2) and dominant, on the demo's 166 ruler lines
    "skewed-lines": (0.02, 0.5, 0.1),
}
LINE_SHAPES = {"skewed-lines": Shape("gamma", 2.0)}
REGIME_LINES = {"skewed-lines": 166}


def _naive_anova(d: np.ndarray) -> dict:
    """Two-way crossed random-effects ANOVA of a (seeds x lines) matrix, by loops."""
    n_s, n_l = d.shape
    grand = sum(d[s][i] for s in range(n_s) for i in range(n_l)) / (n_s * n_l)
    row = [sum(d[s][i] for i in range(n_l)) / n_l for s in range(n_s)]
    col = [sum(d[s][i] for s in range(n_s)) / n_s for i in range(n_l)]
    ms_s = n_l * sum((r - grand) ** 2 for r in row) / (n_s - 1)
    ms_l = n_s * sum((c - grand) ** 2 for c in col) / (n_l - 1)
    ms_e = sum((d[s][i] - row[s] - col[i] + grand) ** 2 for s in range(n_s) for i in range(n_l)) / ((n_s - 1) * (n_l - 1))
    # Var(grand mean) = sigma_a^2/S + sigma_b^2/L + sigma_e^2/(S L), each from its expected mean square.
    var = (ms_s + ms_l - ms_e) / (n_s * n_l)
    df = var ** 2 / ((ms_s / (n_s * n_l)) ** 2 / (n_s - 1) + (ms_l / (n_s * n_l)) ** 2 / (n_l - 1)
                     + (ms_e / (n_s * n_l)) ** 2 / ((n_s - 1) * (n_l - 1)))
    return {"mean": grand, "se": math.sqrt(var), "df": df}


def _runs(change: np.ndarray, base: np.ndarray | None = None) -> list[seeds.RunLines]:
    """One token a line: a run's log ratio is the mean per-line NLL change (linear, like the ANOVA)."""
    base = np.full(change.shape[1], 3.0) if base is None else base
    ones = np.ones(change.shape[1])
    return [seeds.RunLines(base, ones, base + row, ones) for row in change]


@pytest.mark.parametrize("sds", [(0.2, 0.02, 0.05), (0.01, 0.3, 0.05)], ids=["seeds-dominate", "lines-dominate"])
def test_crossed_ci_matches_a_naive_two_way_anova(sds):
    rng = np.random.default_rng(7)
    s_sd, l_sd, e_sd = sds
    change = s_sd * rng.standard_normal((5, 1)) + l_sd * rng.standard_normal((1, 60)) + e_sd * rng.standard_normal((5, 60))
    ref = _naive_anova(change)
    ci = seeds.crossed_ci(_runs(change), n_resamples=40000, seed=1)
    assert ci.mean == pytest.approx(ref["mean"], abs=1e-12)
    assert ci.se == pytest.approx(ref["se"], rel=0.03)  # the bootstrap's Monte-Carlo error at 40000 draws
    assert ci.df == pytest.approx(ref["df"], rel=0.1)
    half = sp.t.ppf(0.975, ref["df"]) * ref["se"]
    assert (ci.hi - ci.lo) / 2 == pytest.approx(half, rel=0.05)
    # The parts: the dominant one is the one the data were built with.
    if s_sd > l_sd:
        assert ci.seed_effect_sd ** 2 / 5 > 10 * ci.shared_line_se ** 2
    else:
        assert ci.shared_line_se ** 2 > 10 * ci.seed_effect_sd ** 2 / 5


def test_paired_crossed_ci_is_the_anova_of_the_per_line_differences():
    rng = np.random.default_rng(8)
    difficulty = rng.gamma(2.0, 1.0, 50)
    base_change = 0.1 * rng.standard_normal((4, 1)) + 0.2 * rng.standard_normal((1, 50)) + 0.05 * rng.standard_normal((4, 50))
    config_change = base_change + 0.03 + 0.1 * rng.standard_normal((1, 50)) + 0.05 * rng.standard_normal((4, 50))
    ci = seeds.crossed_ci(_runs(config_change, difficulty), _runs(base_change, difficulty), n_resamples=40000, seed=2)
    ref = _naive_anova(config_change - base_change)
    assert ci.mean == pytest.approx(ref["mean"], abs=1e-12) and ci.se == pytest.approx(ref["se"], rel=0.03)
    # Pairing by line removes the shared part the two configurations have in common (0.2/sqrt(50)).
    alone = seeds.crossed_ci(_runs(config_change, difficulty), n_resamples=4000, seed=2)
    assert ci.se < 0.7 * alone.se


def _paired_t_over_seeds(d: np.ndarray) -> float:
    """The p tatu printed before: a paired t over the seeds' estimates alone (S - 1 df, the shared
    lines' variance left out), scipy's ttest_rel. Kept here as the reference that must fail."""
    return float(sp.ttest_1samp(d.mean(axis=1), 0.0).pvalue)


def test_the_paired_p_agrees_with_the_crossed_ci_beside_it():
    """Over many simulated paired comparisons (seeds x shared lines, effects near the boundary):
    p < 0.05 exactly when the 95% CI excludes 0, p is scipy's t at the CI's own SE, df and skew,
    and Holm keeps the order. The old p (a paired t over seeds) disagrees with the CI."""
    rng = np.random.default_rng(21)
    old_disagrees = 0
    for k in range(300):
        n_seeds, n_lines = int(rng.integers(2, 6)), int(rng.integers(5, 60))
        seed_sd, line_sd, inter_sd = rng.uniform(0.0, 0.1), rng.uniform(0.0, 0.3), rng.uniform(0.01, 0.2)
        effect = rng.normal(0.0, 0.05)
        base_change = 0.1 * rng.standard_normal((n_seeds, 1)) + 0.05 * rng.standard_normal((n_seeds, n_lines))
        diff = (effect + seed_sd * rng.standard_normal((n_seeds, 1)) + line_sd * rng.standard_normal((1, n_lines))
                + inter_sd * rng.standard_normal((n_seeds, n_lines)))
        ci = seeds.crossed_ci(_runs(base_change + diff), _runs(base_change), n_resamples=300, seed=k)
        excludes = ci.lo > 0.0 or ci.hi < 0.0
        assert (ci.p_value < 0.05) == excludes, (k, ci)
        # the p of the skew-aware interval (tests/evals/test_skew.py checks it by bisection on the level)
        t, g = ci.mean / ci.se, skew.hall(ci.mean / ci.se, ci.skew)
        assert ci.p_value == pytest.approx(min(1.0, 2 * min(sp.t.sf(min(t, g), ci.df), sp.t.cdf(max(t, g), ci.df))),
                                           rel=1e-7, abs=1e-12)
        old_disagrees += (_paired_t_over_seeds(diff) < 0.05) != excludes
    print(f"the old paired-t p disagreed with the CI in {old_disagrees} of 300")
    assert old_disagrees > 0  # the p beside the CI before: a test it fails


def test_one_line_draw_is_shared_by_every_seed():
    rng = np.random.default_rng(2)
    line_effect = rng.normal(0, 0.5, (1, 80))
    replicates = seeds.line_replicates(_runs(np.repeat(line_effect, 3, axis=0) + 0.01 * rng.standard_normal((3, 80))),
                                       None, 500, np.random.default_rng(0))
    assert replicates.shape == (3, 500)
    assert np.corrcoef(replicates)[0, 1] > 0.99  # the same lines in every seed's replicate


def test_crossed_ci_refuses_what_is_not_a_crossed_design():
    with pytest.raises(ValueError, match="same lines"):
        seeds.crossed_ci(_runs(np.zeros((1, 3))) + _runs(np.zeros((1, 4))))
    with pytest.raises(ValueError, match="pair them by seed"):
        seeds.crossed_ci(_runs(np.zeros((2, 3))), _runs(np.zeros((3, 3))))
    with pytest.raises(ValueError, match="at least one"):
        seeds.crossed_ci([])
    with pytest.raises(ValueError, match="at least 2 lines"):
        seeds.crossed_ci(_runs(np.zeros((3, 1))))


# --- coverage on simulated sweeps ----------------------------------------------------------------

def _simulated_sweeps(n_sims: int, n_seeds: int, sds, rng, line_shape: Shape = Shape(),
                      n_lines: int = N_LINES) -> tuple[np.ndarray, ...]:
    """Per sweep: tokens and difficulty per line (shared), the seed effect, the line effect shared
    by every seed (of line_shape: mean 0, SD 1 before scaling), and seed x line noise, all
    vectorised. The truth (the mean over seeds and lines of the population) is 0."""
    s_sd, l_sd, e_sd = sds
    tok = rng.integers(1, 6, size=(n_sims, 1, n_lines)).astype(np.float64)
    difficulty = 3.0 + rng.gamma(2.0, 0.5, size=(n_sims, 1, n_lines))
    change = (s_sd * rng.standard_normal((n_sims, n_seeds, 1)) + l_sd * line_shape.draw(rng, (n_sims, 1, n_lines))
              + e_sd * rng.standard_normal((n_sims, n_seeds, n_lines)))
    base = np.broadcast_to(tok * difficulty, (n_sims, n_seeds, n_lines))
    tok = np.broadcast_to(tok, (n_sims, n_seeds, n_lines))
    return tok, base, base + tok * change


def _old_hierarchical_ci(est, reps, n_resamples: int, seed: int) -> tuple[float, float]:
    """The lines-independent CI tatu used before (lines resampled separately within each seed,
    reflated seed effects, expanded percentile interval): the reference that must fail."""
    est = np.asarray(est)
    n = est.size
    mean = est.mean()
    within = np.mean([r.var(ddof=1) for r in reps])
    between = est.var(ddof=1)
    seed_var = max(0.0, between - within)
    rng = np.random.default_rng(seed)
    effects = mean + (math.sqrt(seed_var / between) if between > 0 else 0.0) * (est - mean)
    drawn = rng.integers(0, n, size=(n_resamples, n))
    dev = np.empty((n_resamples, n))
    for s in range(n):
        mask = drawn == s
        dev[mask] = reps[s][rng.integers(0, reps[s].size, size=int(mask.sum()))] - est[s]
    rep_means = (effects[drawn] + dev).mean(axis=1) - mean
    seed_part, line_part = seed_var / n, within / n
    expand = 1.0
    if seed_part > 0:
        df = (seed_part + line_part) ** 2 / (seed_part ** 2 / (n - 1))
        expand = math.sqrt(n / (n - 1)) * sp.t.ppf(0.975, df) / NormalDist().inv_cdf(0.975)
    q_lo, q_hi = np.quantile(rep_means, [0.025, 0.975])
    return mean + expand * q_lo, mean + expand * q_hi


@dataclass(frozen=True)
class Coverage:
    """Over n_sims simulated sweeps: the share whose CI holds the truth, whose upper bound is below it
    (a false pass at the threshold) and whose lower bound is above it."""

    covered: float
    upper_miss: float
    lower_miss: float
    n_sims: int


def coverage(n_seeds: int, regime: str, method: str = "crossed", n_sims: int = N_SIMS) -> Coverage:
    sds, line_shape, n_lines = REGIMES[regime], LINE_SHAPES.get(regime, Shape()), REGIME_LINES.get(regime, N_LINES)
    rng = np.random.default_rng([n_seeds, len(sds), int(sds[1] * 1000)] + ([n_lines] if n_lines != N_LINES else []))
    tok, base, end = _simulated_sweeps(n_sims, n_seeds, sds, rng, line_shape, n_lines)
    above = below = 0
    for k in range(n_sims):
        runs = [seeds.RunLines(base[k, s], tok[k, s], end[k, s], tok[k, s]) for s in range(n_seeds)]
        if method == "crossed":
            ci = seeds.crossed_ci(runs, n_resamples=400, seed=k)
            lo, hi = ci.lo, ci.hi
        else:  # each seed's lines resampled on their own, as if every seed had drawn its own lines
            reps = [seeds.line_replicates([r], None, 200, np.random.default_rng([k, s]))[0] for s, r in enumerate(runs)]
            lo, hi = _old_hierarchical_ci([r.log_ratio() for r in runs], reps, 400, k)
        above, below = above + (hi < 0.0), below + (lo > 0.0)
    return Coverage(1.0 - (above + below) / n_sims, above / n_sims, below / n_sims, n_sims)


def _mc_se(rate: float, n_sims: int) -> float:
    """The Monte-Carlo SE of a rate measured over n_sims independent simulated sweeps."""
    return math.sqrt(rate * (1.0 - rate) / n_sims)


def one_sided_ok(miss: float, n_sims: int, sigmas: float = 3.0) -> bool:
    """A one-sided miss rate within the nominal 2.5% plus `sigmas` Monte-Carlo SEs of a 2.5% rate."""
    return miss <= ONE_SIDED + sigmas * _mc_se(ONE_SIDED, n_sims)


@pytest.mark.slow
@pytest.mark.parametrize("n_seeds", [3, 5])
@pytest.mark.parametrize("regime", list(REGIMES))
def test_crossed_ci_coverage_is_nominal_in_every_regime(regime, n_seeds):
    got = coverage(n_seeds, regime, n_sims=COVERAGE_SIMS)
    mc_se = _mc_se(got.covered, COVERAGE_SIMS)
    print(f"coverage {regime} {n_seeds} seeds: {got.covered:.3f} (mc_se {mc_se:.4f}, {COVERAGE_SIMS} sweeps); "
          f"upper bound below the truth {got.upper_miss:.4f}, lower bound above it {got.lower_miss:.4f}")
    # The band must be at least 3 Monte-Carlo SEs from the measured value, so the verdict does not
    # hang on the draws; above, only where the interval is not meant to be conservative.
    assert got.covered - 3 * mc_se >= COVERAGE_LOW, got
    if regime not in CONSERVATIVE:
        assert got.covered + 3 * mc_se <= COVERAGE_HIGH, got
    # each side on its own: a false pass at the threshold is the upper bound's miss alone
    # (the seed-dominated regime at 3 seeds missed 3.3-3.7% on each side before the seed mean square
    # entered the df at its upper confidence limit: evals/seeds/power.py)
    assert one_sided_ok(got.upper_miss, COVERAGE_SIMS) and one_sided_ok(got.lower_miss, COVERAGE_SIMS), got


@pytest.mark.slow
@pytest.mark.parametrize("n_seeds", [3, 5])
def test_a_lines_independent_ci_fails_the_coverage_test_when_lines_are_shared(n_seeds):
    got = coverage(n_seeds, "shared-line-dominated", method="lines-independent")
    mc_se = _mc_se(got.covered, N_SIMS)
    print(f"coverage of the lines-independent CI, shared-line-dominated, {n_seeds} seeds: {got.covered:.3f} (mc_se {mc_se:.4f})")
    assert got.covered + 3 * mc_se < COVERAGE_LOW, got


# --- one-sided levels in the closed form: thousands of sweeps in seconds ---------------------------

def closed_form_misses(n_seeds: int, n_lines: int, share: float, effects: Effects, n_sims: int,
                       seed: int) -> tuple[float, float]:
    """(upper, lower) miss rates of the fixed design's 95% crossed CI on simulated sweeps
    (evals/seeds/simulate.py, truth 0, seed effects 70% of a seed's variance), judged by the
    library's own fixed_pass on the two-way ANOVA estimates crossed_ci makes (test_simulated_parts_are
    _crossed_cis): the upper bound's miss is a pass of the criterion `_hi < 0`; the lower bound's,
    the same on the mirrored data (the interval of -y is the mirror of y's)."""
    rng = np.random.default_rng([seed, n_seeds, n_lines, int(share * 100)])
    lines = share / (n_seeds * (1.0 - share))
    above = below = 0
    for start in range(0, n_sims, 1000):
        y = crossed_data(rng, min(1000, n_sims - start), n_seeds, 0.0, lines, n_lines, effects)
        above += sum(fixed_pass(e, 0.0) for e in anova_estimates(y, n_seeds))
        below += sum(fixed_pass(e, 0.0) for e in anova_estimates(-y, n_seeds))
    return above / n_sims, below / n_sims


ONE_SIDED = 0.025
CLOSED_SIMS = 6000  # a 2.5% rate comes out at +-0.20 points (MC SE); 3 SEs: the bar is 3.1%
# (seeds, lines, the lines' share of Var(mean), effects): the floored seed part at 3 seeds, skewed
# shared lines (gamma: skewness 2 and 4) from a small to the dominant share, heavy tails, a skewed
# seed x line part and a mildly skewed seed effect (docs/sweeps.md: the range these hold in)
CLOSED_CELLS = {
    "normal, 3 seeds": (3, 100, 0.05, Effects()),
    "normal, 10 seeds": (10, 166, 0.5, Effects()),
    "lines gamma2 dominant": (10, 100, 0.9, Effects(line=Shape("gamma", 2.0))),
    "lines gamma2 dominant, 3 seeds": (3, 166, 0.9, Effects(line=Shape("gamma", 2.0))),
    "lines gamma4 half": (5, 100, 0.5, Effects(line=Shape("gamma", 4.0))),
    "lines t3 dominant": (10, 100, 0.9, Effects(line=Shape("t", 3.0))),
    "interaction gamma4": (5, 100, 0.5, Effects(interaction=Shape("gamma", 4.0))),
    "seeds gamma0.5": (10, 166, 0.05, Effects(seed=Shape("gamma", 0.5))),
}
SLOW_CELLS = {"lines gamma4 half", "interaction gamma4", "seeds gamma0.5", "normal, 10 seeds"}


@pytest.mark.parametrize("cell", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CELLS else c
                                  for c in CLOSED_CELLS])
def test_each_bound_misses_at_most_its_one_sided_level(cell):
    """Before issue 45 the upper bound missed 3.3% at 3 seeds (the floored seed part bought ~100 df)
    and 4-6% where skewed lines dominated (a symmetric t interval around a skewed mean)."""
    n_seeds, n_lines, share, effects = CLOSED_CELLS[cell]
    upper, lower = closed_form_misses(n_seeds, n_lines, share, effects, CLOSED_SIMS, seed=45)
    print(f"{cell}: upper bound below the truth {upper:.4f}, lower bound above it {lower:.4f} "
          f"({CLOSED_SIMS} sweeps, a 2.5% rate's MC SE {_mc_se(ONE_SIDED, CLOSED_SIMS):.4f})")
    assert one_sided_ok(upper, CLOSED_SIMS), upper
    assert one_sided_ok(lower, CLOSED_SIMS), lower

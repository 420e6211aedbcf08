"""evals/seeds/power.py (seeds for a stated effect: seeds_needed, crossed_power, line_floor) against
simulated crossed experiments: per-line changes with a known seed SD, shared-line SD and seed x
line SD, the effect the report states (2%), many experiments at the seed count the formula names
and at one seed fewer, each judged by the crossed 95% CI the report prints.

The CI of each simulated experiment is the two-way ANOVA interval crossed_ci estimates (its
parts, their truncation at 0 and Satterthwaite's df, written here vectorised and independently;
tests/evals/test_seeds_crossed.py checks crossed_ci against the same ANOVA), so thousands of
experiments take under a second; one test runs crossed_ci itself at the named seed count.

Measured powers (printed with -s; docs/sweeps.md quotes them):
    .venv/bin/pytest -q -s tests/evals/test_seeds_power.py
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp

from tatu.evals.seeds import power as seeds_power, stats as seeds

N_LINES = 166  # the demo's enRuler
EFFECT = math.log1p(0.02)  # the report's default: a 2% change of perplexity
N_EXPERIMENTS = 4000  # a true power of 80% comes out at 80.0 +- 0.63 points (binomial SD)
# The band: the simulated power within 3 points of crossed_power's (about 4.7 binomial SDs, so
# a correct formula fails it about once in 400000 runs, plus ~1 point for crossed_power's
# approximation of the noncentral t by a shifted central one at Satterthwaite's df).
BAND = 0.03
# (seed SD, shared-line SD, seed x line SD) of the per-line log change, one token a line
REGIMES = {
    "seed-dominated": (0.02, 0.02, 0.05),
    "both": (0.015, 0.05, 0.05),
    "shared-line-dominated": (0.005, 0.1, 0.05),
}


def _true_parts(sds, n_lines: int = N_LINES) -> seeds_power.CrossedParts:
    seed_sd, line_sd, inter_sd = sds
    return seeds_power.CrossedParts(seed=seed_sd ** 2, interaction=inter_sd ** 2 / n_lines, lines=line_sd ** 2 / n_lines,
                              n_lines=n_lines)


def _experiments(n: int, n_seeds: int, sds, rng, n_lines: int = N_LINES) -> np.ndarray:
    """(experiments, seeds, lines) per-line changes: the effect + seed + line (shared by every seed of
    an experiment, new per experiment) + seed x line."""
    seed_sd, line_sd, inter_sd = sds
    return (EFFECT + seed_sd * rng.standard_normal((n, n_seeds, 1)) + line_sd * rng.standard_normal((n, 1, n_lines))
            + inter_sd * rng.standard_normal((n, n_seeds, n_lines)))


def _anova_lower_bound(d: np.ndarray) -> np.ndarray:
    """Per experiment, the lower end of the 95% crossed CI: the two-way random-effects ANOVA's
    Var(grand mean) = the seed mean square (unbiased) + the line part (its mean square less the
    interaction's, at least 0); Satterthwaite's df with the seed term always at S - 1 df and the
    seed mean square in it at least the interaction's; the lower bound moved outwards by Hall's
    transformation at 1.5 x the lines' skewness (as crossed_ci builds it; here with numpy and scipy)."""
    _, n_s, n_l = d.shape
    grand, row, col = d.mean(axis=(1, 2)), d.mean(axis=2), d.mean(axis=1)
    ms_s = n_l * ((row - grand[:, None]) ** 2).sum(axis=1) / (n_s - 1)
    ms_l = n_s * ((col - grand[:, None]) ** 2).sum(axis=1) / (n_l - 1)
    resid = d - row[:, :, None] - col[:, None, :] + grand[:, None, None]
    ms_e = (resid ** 2).sum(axis=(1, 2)) / ((n_s - 1) * (n_l - 1))
    cells = n_s * n_l
    line_part = np.maximum(0, ms_l - ms_e) / cells
    var = ms_s / cells + line_part
    has_l = (line_part > 0).astype(float)
    seed_term = np.maximum(ms_s, ms_e) / cells
    spread = (seed_term ** 2 / (n_s - 1) + (has_l * ms_l / cells) ** 2 / (n_l - 1)
              + (has_l * ms_e / cells) ** 2 / ((n_s - 1) * (n_l - 1)))
    q = sp.t.ppf(0.975, (seed_term + line_part) ** 2 / spread)
    gamma = 1.5 * sp.kstat(col, 3, axis=1) / n_l ** 2 / var ** 1.5
    with np.errstate(divide="ignore", invalid="ignore"):
        hall_q = np.where(np.abs(gamma) > 1e-12, 3 / gamma * (np.cbrt(1 + gamma * (q - gamma / 6)) - 1), q)
    return grand - np.maximum(q, hall_q) * np.sqrt(var)


def simulated_power(n_seeds: int, sds, seed: int, n: int = N_EXPERIMENTS, n_lines: int = N_LINES) -> float:
    """The share of n experiments whose CI excludes 0 on the effect's side (in chunks: memory)."""
    rng = np.random.default_rng([seed, n_seeds, n_lines])
    hits = sum(int((_anova_lower_bound(_experiments(500, n_seeds, sds, rng, n_lines)) > 0).sum()) for _ in range(n // 500))
    return hits / n


@pytest.mark.parametrize("regime", ["seed-dominated", "both"])
def test_the_named_seed_count_reaches_80_percent_power_and_one_fewer_does_not(regime):
    parts = _true_parts(REGIMES[regime])
    needed = seeds_power.seeds_needed(parts, EFFECT)
    assert needed is not None and needed > 3
    # The fewest: the formula's power crosses 80% exactly there.
    assert seeds_power.crossed_power(parts, needed - 1, EFFECT) < 0.8 <= seeds_power.crossed_power(parts, needed, EFFECT)
    at, fewer = simulated_power(needed, REGIMES[regime], 1), simulated_power(needed - 1, REGIMES[regime], 2)
    print(f"{regime}: seeds for MDE 2%: {needed}; power at {needed}: {at:.3f} simulated, "
          f"{seeds_power.crossed_power(parts, needed, EFFECT):.3f} stated; at {needed - 1}: {fewer:.3f} simulated, "
          f"{seeds_power.crossed_power(parts, needed - 1, EFFECT):.3f} stated ({N_EXPERIMENTS} experiments each)")
    assert abs(at - seeds_power.crossed_power(parts, needed, EFFECT)) <= BAND, at
    assert abs(fewer - seeds_power.crossed_power(parts, needed - 1, EFFECT)) <= BAND, fewer
    assert at >= 0.8 - BAND, at
    # One seed fewer gives less power: more than 3 binomial SDs of the difference (0.9 points).
    assert at - fewer > 0.027, (at, fewer)


def test_when_the_shared_lines_alone_allow_too_little_no_seed_count_reaches_80_percent():
    sds = REGIMES["shared-line-dominated"]
    parts = _true_parts(sds)
    assert seeds_power.seeds_needed(parts, EFFECT) is None
    assert seeds_power.line_floor(parts) > EFFECT
    # Adding seeds barely moves the power: the lines part is the same for every seed count.
    powers = {n: simulated_power(n, sds, 3, n=2000) for n in (10, 40)}
    print(f"shared-line-dominated: no seed count; power at 10 seeds {powers[10]:.3f}, at 40 {powers[40]:.3f} "
          f"(stated {seeds_power.crossed_power(parts, 10, EFFECT):.3f}, {seeds_power.crossed_power(parts, 40, EFFECT):.3f})")
    assert all(p < 0.8 - BAND for p in powers.values()), powers
    assert abs(powers[40] - seeds_power.crossed_power(parts, 40, EFFECT)) <= BAND
    # More lines would: four times the lines halve the floor, and a seed count exists again.
    more = seeds_power.seeds_needed(_true_parts(sds, 4 * N_LINES), EFFECT)
    assert more is not None
    at = simulated_power(more, sds, 4, n=2000, n_lines=4 * N_LINES)
    print(f"... with {4 * N_LINES} lines: seeds for MDE 2%: {more}; simulated power there {at:.3f}")
    assert at >= 0.8 - BAND, at


def test_crossed_ci_itself_reaches_the_stated_power():
    """The report's own interval (bootstrap parts, 400 resamples) on 400 experiments at the seed
    count the formula names: a 4-SD band of 8 points (binomial SD 2.0 points at 400)."""
    sds = REGIMES["seed-dominated"]
    parts = _true_parts(sds)
    needed = seeds_power.seeds_needed(parts, EFFECT)
    d = _experiments(400, needed, sds, np.random.default_rng(5))
    ones, base = np.ones(N_LINES), np.full(N_LINES, 3.0)
    hits = sum(seeds.crossed_ci([seeds.RunLines(base, ones, base + row, ones) for row in exp], n_resamples=400, seed=k).lo > 0
               for k, exp in enumerate(d))
    print(f"crossed_ci at {needed} seeds: power {hits / 400:.3f}")
    assert abs(hits / 400 - seeds_power.crossed_power(parts, needed, EFFECT)) <= 0.08, hits / 400


def test_a_pilot_measures_the_parts_that_name_the_seed_count():
    """From pilots through crossed_ci: a 3-seed pilot of the shared-line-dominated regime says "no
    seed count" nearly always and of the seed-dominated regime never; 20-seed pilots of the
    seed-dominated regime name, in the median, the true count within 2."""
    ones, base = np.ones(N_LINES), np.full(N_LINES, 3.0)

    def pilot_needed(regime: str, n_seeds: int, k: int) -> int | None:
        d = _experiments(1, n_seeds, REGIMES[regime], np.random.default_rng([n_seeds, k]))[0]
        ci = seeds.crossed_ci([seeds.RunLines(base, ones, base + row, ones) for row in d], n_resamples=1000, seed=k)
        return seeds_power.seeds_needed(ci.parts, EFFECT)

    lines = [pilot_needed("shared-line-dominated", 3, k) for k in range(20)]
    assert sum(n is None for n in lines) >= 16, lines
    small = [pilot_needed("seed-dominated", 3, k) for k in range(20)]
    assert all(n is not None for n in small), small
    truth = seeds_power.seeds_needed(_true_parts(REGIMES["seed-dominated"]), EFFECT)
    big = [pilot_needed("seed-dominated", 20, k) for k in range(20)]
    print(f"seed-dominated: truth {truth}; 3-seed pilots say {sorted(small)}; 20-seed pilots say {sorted(big)}; "
          f"shared-line-dominated 3-seed pilots: {sum(n is None for n in lines)} of 20 say none")
    assert abs(float(np.median(big)) - truth) <= 2, big


def test_the_formula_against_scipy_and_its_seeds_only_limit():
    parts = seeds_power.CrossedParts(seed=0.02 ** 2, interaction=0.05 ** 2 / 100, lines=0.03 ** 2 / 100, n_lines=100)
    for n in (2, 3, 7, 30):
        inter = parts.interaction / n
        seed_ms, line_ms = parts.seed / n + inter, parts.lines + inter
        var = seed_ms + line_ms - inter  # sigma_a^2/S + sigma_b^2/L + sigma_e^2/(S L)
        # the smaller df of the seed mean square at its estimate and at its 65% upper limit
        df = min((m + line_ms - inter) ** 2 / (m ** 2 / (n - 1) + line_ms ** 2 / 99 + inter ** 2 / ((n - 1) * 99))
                 for m in (seed_ms, seed_ms * (n - 1) / sp.chi2.ppf(0.35, n - 1)))
        assert seeds_power.crossed_mde(parts, n) == pytest.approx((sp.t.ppf(0.975, df) + sp.t.ppf(0.8, df)) * math.sqrt(var), rel=1e-8)
        assert seeds_power.crossed_power(parts, n, seeds_power.crossed_mde(parts, n)) == pytest.approx(0.8, abs=1e-8)
    assert seeds_power.line_floor(parts) == pytest.approx((sp.t.ppf(0.975, 99) + sp.t.ppf(0.8, 99)) * 0.03 / 10, rel=1e-8)
    # Seeds alone: the paired t over seeds' MDE, (t_.975 + t_.8 at n - 1 df) * sd / sqrt(n).
    alone = seeds_power.CrossedParts(seed=0.02 ** 2, interaction=0.0, lines=0.0, n_lines=100)
    assert seeds_power.crossed_mde(alone, 5) == pytest.approx((sp.t.ppf(0.975, 4) + sp.t.ppf(0.8, 4)) * 0.02 / math.sqrt(5), rel=1e-8)
    # The fewest seeds (a plain loop over seed counts: test_seeds_needed_is_the_fewest_count_...).
    assert seeds_power.seeds_needed(parts, 0.005) is None and seeds_power.line_floor(parts) > 0.005
    # Power 0.5: the CI's expected half-width (t_.975 * SE) under the margin.
    n = seeds_power.seeds_needed(alone, 0.03, power=0.5)
    assert sp.t.ppf(0.975, n - 1) * 0.02 / math.sqrt(n) <= 0.03 < sp.t.ppf(0.975, n - 2) * 0.02 / math.sqrt(n - 1)


def _naive_mde(parts: seeds_power.CrossedParts, n_seeds: np.ndarray, power: float = 0.8) -> np.ndarray:
    """crossed_mde at every seed count in n_seeds, vectorised with scipy's t (the formula of the
    module doc: Satterthwaite with the seed term always present, its mean square at least the
    interaction's, the smaller df of that mean square at its estimate and at its 65% upper limit)."""
    n = n_seeds.astype(np.float64)
    inter = parts.interaction / n
    line_ms = parts.lines + inter
    c_l = float(parts.lines > 0)
    dfs = []
    for factor in (1.0, (n - 1) / sp.chi2.ppf(0.35, n - 1)):  # the estimate, its 65% upper limit: the smaller df
        seed_ms = np.maximum((parts.seed + parts.interaction) / n * factor, inter)
        spread = (seed_ms ** 2 / (n - 1) + (c_l * line_ms) ** 2 / (parts.n_lines - 1)
                  + (c_l * inter) ** 2 / ((n - 1) * (parts.n_lines - 1)))
        dfs.append((seed_ms + c_l * parts.lines) ** 2 / spread)
    df = np.minimum(*dfs)
    var = (parts.seed + parts.interaction) / n + parts.lines
    return (sp.t.ppf(0.975, df) + sp.t.ppf(power, df)) * np.sqrt(var)


@pytest.mark.parametrize("n_lines", [3, 5, 10, 100])
def test_seeds_needed_is_the_fewest_count_a_plain_loop_finds(n_lines):
    """Against every seed count from 2 to 20000 at once. With few lines Satterthwaite's df can
    exceed L - 1 at a finite seed count, so crossed_mde dips below its limit (line_floor): a count
    exists where the limit says none. The effects straddle the limit to catch that."""
    rng = np.random.default_rng(n_lines)
    counts = np.arange(2, 20_000)
    dipped = 0
    for _ in range(12):
        seed_sd, line_sd, inter_sd = rng.uniform(0.001, 0.05, 3)
        parts = seeds_power.CrossedParts(seed=seed_sd ** 2, interaction=inter_sd ** 2 / n_lines,
                                         lines=line_sd ** 2 / n_lines, n_lines=n_lines)
        mde = _naive_mde(parts, counts)
        limit = seeds_power.line_floor(parts)
        # the dip's bottom too, where there is one (a minimum at the end is the limit, approached from above)
        bottom = [float(mde.min()) * (1 + 1e-9)] if int(mde.argmin()) < counts.size - 1000 else []
        for effect in (0.9 * limit, 0.97 * limit, 0.995 * limit, 1.05 * limit, 2 * limit, *bottom):
            ok = np.nonzero(mde <= effect)[0]
            found = seeds_power.seeds_needed(parts, effect)  # past the loop's end: the loop's None
            assert (found if found is None or found <= counts[-1] else None) == (int(counts[ok[0]]) if ok.size else None), \
                (parts, effect)
            dipped += bool(ok.size) and effect < limit
            # mde_at_least is a lower bound wherever it claims one
            low = int(rng.integers(2, 50))
            assert seeds_power.mde_at_least(parts, low, 4 * low) <= mde[low - 2:4 * low - 1].min() * (1 + 1e-9)
            assert seeds_power.mde_at_least(parts, low, math.inf) <= mde[low - 2:].min() * (1 + 1e-9)
    if n_lines <= 5:
        assert dipped > 0  # the case a limit used as a floor answers "none" for


def test_a_seed_part_measured_at_or_below_0_keeps_its_seed_df():
    """Three seeds on 100 lines whose seeds scatter less than their seed x line noise alone would make
    them (the seed part measured below 0, a quarter of the time at 3 seeds): Satterthwaite by hand
    with the seed mean square at 2 df. tatu before issue 45 floored the part at 0 and dropped the seed
    term, handing the interval the lines' L - 1 = 99 df (the interaction's (S - 1)(L - 1) = 198 where
    the line part is 0 too): a nearly normal bound on an SE without the seed variance."""
    parts = seeds_power.CrossedParts(seed=-0.002, interaction=0.3 / 100, lines=0.01 / 100, n_lines=100)
    n = 3
    inter = parts.interaction / n
    line_ms = parts.lines + inter
    # the mean square at least the interaction's, at its estimate and at its 65% upper limit (2 df): the smaller df
    by_hand = min((m + parts.lines) ** 2 / (m ** 2 / 2 + line_ms ** 2 / 99 + inter ** 2 / 198)
                  for m in (max(inter, (parts.seed + parts.interaction) / n * f) for f in (1.0, 2 / sp.chi2.ppf(0.35, 2))))
    assert parts.df(n) == pytest.approx(by_hand, rel=1e-12)
    assert 2.0 <= parts.df(n) < 2.5  # the seeds' 2, a little more from the lines' own part
    old = (parts.lines + inter) ** 2 / (line_ms ** 2 / 99 + 0.0)  # the seed term dropped, the rest as before
    assert old == pytest.approx(99)  # what the floored part bought before
    # the variance is the seeds' own: (sigma_a^2 + sigma_e^2 / L) / S + lines, the seed part not floored
    assert parts.variance(n) == pytest.approx((parts.seed + parts.interaction) / n + parts.lines, rel=1e-12)
    assert parts.floored().variance(n) > parts.variance(n)  # what a sequential look's SE takes

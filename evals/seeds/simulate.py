"""Simulated crossed experiments (seeds x shared lines) judged by tatu's own look code
(evals/seeds/sequential.look), so the sequential design's error rate, power and runs are measured,
never assumed: bench/sequential.py prints them, tests/evals/test_sequential_sim.py holds the goals.

Per configuration, the per-line change is mu + a_s + b_i + e_si (the module doc of
evals/seeds/stats.py); a seed's statistic is its mean over the L lines. Everything is in units of
one seed's SD, sqrt(sigma_a^2 + sigma_e^2 / L) = 1, and the threshold is 0: a configuration at -1
is one seed SD on the passing side. The variance parts at S seeds are the two-way ANOVA's, the
quantities crossed_ci estimates by its crossed bootstrap (tests/evals/test_seeds_crossed.py checks
crossed_ci against the same ANOVA), computed here in closed form so that 20,000 sweeps take
minutes, not days; the looks themselves (boundaries, t conversion, decisions) are the real code.

Each configuration is looked at after each seed from min_seeds until its criterion is decided or
max_seeds is reached; its runs are the seeds it got. The fixed design runs max_seeds and passes on
the 95% CI; the naive rule looks as often but with that same 95% CI at every look (no spending).

A design that pools the seed variance (min_seeds = 2) is simulated as `first config` runs it: the
scenario's configurations one after another, all sharing sigma_a, each look at n seeds pooling its
own n seeds with each earlier configuration's first min(n, seeds it ran) (the members finished by
then, as sweep/sequential/schedule.pool_source takes them), through the real SeedPool and pooled().
The earlier configurations stopped on their own data, so the pool is as selected as a sweep's.
"unpooled" is the same design's looks on each configuration's own seeds alone (1 df at 2 seeds).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tatu.evals.seeds.power import CrossedParts
from tatu.evals.seeds.sequential import Design, Estimate, SeedPool, fixed_pass, look, pooled

N_LINES = 100
SEED_SHARE = 0.7  # sigma_a^2 of one seed's unit variance; the rest is its seed x line noise sigma_e^2 / L


@dataclass(frozen=True)
class Scenario:
    """Configurations at `offsets` seed SDs from the threshold (negative: the passing side), with the
    shared lines' variance of the mean sigma_b^2 / L = `lines` (in seed variances)."""

    name: str
    offsets: tuple[float, ...]
    lines: float = 0.01


SCENARIOS = {
    "mixed": Scenario("mixed", (-3.0, -2.0, -1.0, 0.5, 2.0, 4.0)),
    "clear": Scenario("clear", (-4.0, -3.0, -2.0, 2.0, 3.0, 4.0)),
    "at_threshold": Scenario("at_threshold", (0.0,) * 6),
    # the lines' part of the mean's variance is 0.5 of one seed's: at 10 seeds, 5/6 of the whole
    "shared_lines": Scenario("shared_lines", (-3.0, -2.0, -1.0, 0.5, 2.0, 4.0), lines=0.5),
}


@dataclass(frozen=True)
class Outcome:
    """One configuration's simulated sequential test: how many seeds it ran and its decision."""

    runs: int
    decision: str


def crossed_data(rng: np.random.Generator, reps: int, seeds: int, offset: float, lines: float,
                 n_lines: int = N_LINES) -> np.ndarray:
    """(reps, seeds, lines) per-line changes: offset + a_s + b_i + e_si in seed-SD units."""
    sigma_a = math.sqrt(SEED_SHARE)
    sigma_e = math.sqrt((1.0 - SEED_SHARE) * n_lines)
    sigma_b = math.sqrt(lines * n_lines)
    return (offset + sigma_a * rng.standard_normal((reps, seeds, 1)) + sigma_b * rng.standard_normal((reps, 1, n_lines))
            + sigma_e * rng.standard_normal((reps, seeds, n_lines)))


def anova_estimates(y: np.ndarray, n_seeds: int) -> list[Estimate]:
    """Per replicate, the crossed ANOVA of the first n_seeds seeds: the mean and the parts
    crossed_ci estimates (seed_ms, line_ms, inter_ms as its module doc defines them, each part >= 0)."""
    block = y[:, :n_seeds, :]
    n_lines = block.shape[2]
    seed_means, line_means = block.mean(axis=2), block.mean(axis=1)
    grand = seed_means.mean(axis=1)
    resid = block - seed_means[:, :, None] - line_means[:, None, :] + grand[:, None, None]
    inter_ms = (resid ** 2).sum(axis=(1, 2)) / ((n_seeds - 1) * (n_lines - 1)) / (n_seeds * n_lines)
    seed_ms = seed_means.var(axis=1, ddof=1) / n_seeds
    line_ms = line_means.var(axis=1, ddof=1) / n_lines
    out = []
    for mean, s_ms, l_ms, i_ms in zip(grand, seed_ms, line_ms, inter_ms):
        parts = CrossedParts(seed=max(0.0, s_ms - i_ms) * n_seeds, interaction=i_ms * n_seeds,
                             lines=max(0.0, l_ms - i_ms), n_lines=n_lines)
        out.append(Estimate(n_seeds, float(mean), parts))
    return out


def seed_sums_of_squares(y: np.ndarray) -> np.ndarray:
    """(reps, seeds + 1): per replicate, the sum of squares of its first s seeds' statistics about
    their mean (column s; 0 below 2 seeds)."""
    seed_means = y.mean(axis=2)
    out = np.zeros((seed_means.shape[0], seed_means.shape[1] + 1))
    for s in range(2, seed_means.shape[1] + 1):
        block = seed_means[:, :s]
        out[:, s] = ((block - block.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    return out


@dataclass(frozen=True)
class Ran:
    """An earlier configuration of the same replicates, as a later one's pool sees it."""

    sums_of_squares: np.ndarray  # seed_sums_of_squares of its data
    runs: np.ndarray             # (reps,) the seeds it ran


def _pools(own: np.ndarray, earlier: list[Ran], n: int) -> list[SeedPool]:
    """Per replicate, the look at n seeds' pool: its own n seeds and each earlier configuration's
    first min(n, runs)."""
    rows = np.arange(own.shape[0])
    total, df, n_configs = own[:, n].copy(), np.full(own.shape[0], n - 1), np.ones(own.shape[0], dtype=int)
    for other in earlier:
        seeds = np.minimum(n, other.runs)
        total += other.sums_of_squares[rows, seeds]
        df += np.maximum(0, seeds - 1)
        n_configs += seeds >= 2
    return [SeedPool(float(t), int(d), int(c)) for t, d, c in zip(total, df, n_configs)]


def _first_decisions(design: Design, y: np.ndarray, decide, earlier: list[Ran] | None = None) -> list[Outcome]:
    """Each replicate's first look whose `decide(estimate)` is not "continue", seeds min..max;
    with `earlier` (a pooling design), on estimates whose seed variance is pooled with theirs."""
    by_seeds = {s: anova_estimates(y, s) for s in range(design.min_seeds, design.max_seeds + 1)}
    if earlier is not None:
        own = seed_sums_of_squares(y)
        by_seeds = {s: [pooled(est, pool) for est, pool in zip(ests, _pools(own, earlier, s))]
                    for s, ests in by_seeds.items()}
    out = []
    for r in range(y.shape[0]):
        for s in range(design.min_seeds, design.max_seeds + 1):
            decision = decide(by_seeds[s][r])
            if decision != "continue":
                out.append(Outcome(s, decision))
                break
    return out


def sequential_outcomes(design: Design, y: np.ndarray, earlier: list[Ran] | None = None) -> list[Outcome]:
    """Each replicate through tatu's looks: seeds until decided or max_seeds."""
    return _first_decisions(design, y, lambda est: look(design, est, 0.0).decision, earlier)


def naive_outcomes(design: Design, y: np.ndarray, earlier: list[Ran] | None = None) -> list[Outcome]:
    """The rule without spending: stop when the 95% CI clears the threshold, on either side."""
    def decide(est: Estimate) -> str:
        if fixed_pass(est, 0.0):
            return "pass"
        flipped = Estimate(est.n_seeds, -est.mean, est.parts, est.seed_df)  # the lower bound above the threshold
        return "fail" if fixed_pass(flipped, 0.0) or est.n_seeds == design.max_seeds else "continue"

    return _first_decisions(design, y, decide, earlier)


def fixed_outcomes(design: Design, y: np.ndarray, earlier: list[Ran] | None = None) -> list[Outcome]:
    """The fixed design: max_seeds seeds, the 95% CI's upper bound against the threshold."""
    return [Outcome(design.max_seeds, "pass" if fixed_pass(est, 0.0) else "fail")
            for est in anova_estimates(y, design.max_seeds)]


@dataclass(frozen=True)
class Summary:
    """A design on a scenario: false passes at the threshold (configurations with offset >= 0 that
    passed, over those configurations), the pass rate of the configuration at -1 SD (nan if none),
    and the seeds run against the fixed design's max_seeds x configurations."""

    reps: int
    false_pass: float
    false_pass_se: float
    pass_at_minus1sd: float
    runs_vs_fixed: float


def run_scenario(design: Design, scenario: Scenario, reps: int, seed: int, rule: str = "sequential",
                 chunk: int = 2000) -> Summary:
    """`reps` simulated sweeps of the scenario's configurations under `rule` (sequential | naive | fixed,
    and for a pooling design unpooled: its looks on each configuration's own seeds)."""
    judge = {"sequential": sequential_outcomes, "unpooled": sequential_outcomes, "naive": naive_outcomes,
             "fixed": fixed_outcomes}[rule]
    pools = design.pools_seed_variance and rule in ("sequential", "naive")
    rng = np.random.default_rng(seed)
    null_passes = null_total = minus1_passes = minus1_total = runs = 0
    done = 0
    while done < reps:
        n = min(chunk, reps - done)
        earlier: list[Ran] = []
        for offset in scenario.offsets:
            y = crossed_data(rng, n, design.max_seeds, offset, scenario.lines)
            outcomes = judge(design, y, earlier if pools else None)
            if pools:
                earlier.append(Ran(seed_sums_of_squares(y), np.array([o.runs for o in outcomes])))
            runs += sum(o.runs for o in outcomes)
            passes = sum(o.decision == "pass" for o in outcomes)
            if offset >= 0.0:  # the criterion is false: a pass is a false pass
                null_passes, null_total = null_passes + passes, null_total + n
            if offset == -1.0:
                minus1_passes, minus1_total = minus1_passes + passes, minus1_total + n
        done += n
    false_pass = null_passes / null_total if null_total else math.nan
    se = math.sqrt(false_pass * (1 - false_pass) / null_total) if null_total else math.nan
    return Summary(reps, false_pass, se, minus1_passes / minus1_total if minus1_total else math.nan,
                   runs / (reps * len(scenario.offsets) * design.max_seeds))

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

The real path (path="real") decides the same simulated data through what a sweep runs: each look's
seeds as RunLines (one token a line, start scores 0, so a run's log ratio is its mean change),
crossed_ci's bootstrap (DEFAULT_RESAMPLES), estimate_of and look; the closed form's decisions on the
same data are counted beside it (Summary.agreement).

Effects: each part (seed, shared line, seed x line) is drawn from a standardized Shape (mean 0, SD 1):
normal, gamma with a given skewness (right-skewed: a few lines forgotten far more than the rest),
lognormal (skewed and heavy-tailed) or Student's t (heavy-tailed, symmetric), so the one-sided
error rates can be measured where the normal model does not hold (bench/one_sided.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tatu.evals.seeds.power import CrossedParts
from tatu.evals.seeds.sequential import Design, Estimate, SeedPool, estimate_of, fixed_fail, fixed_pass, look, pooled
from tatu.evals.seeds.stats import DEFAULT_RESAMPLES, RunLines, crossed_ci

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


@dataclass(frozen=True)
class Shape:
    """A standardized distribution (mean 0, SD 1) of one part of the per-line change: "normal";
    "gamma" with skewness `value` (> 0); "lognormal" with log-SD `value`; "t" with `value` df (> 2)."""

    kind: str = "normal"
    value: float = 0.0

    def draw(self, rng: np.random.Generator, size) -> np.ndarray:
        if self.kind == "normal":
            return rng.standard_normal(size)
        if self.kind == "gamma":
            k = 4.0 / self.value ** 2  # a gamma of shape k has skewness 2 / sqrt(k)
            return (rng.gamma(k, 1.0, size) - k) / math.sqrt(k)
        if self.kind == "lognormal":
            s2 = self.value ** 2
            return (np.exp(self.value * rng.standard_normal(size)) - math.exp(s2 / 2)) / math.sqrt(math.expm1(s2) * math.exp(s2))
        if self.kind == "t":
            return rng.standard_t(self.value, size) / math.sqrt(self.value / (self.value - 2.0))
        raise ValueError(f"unknown shape {self.kind!r} (known: normal, gamma, lognormal, t)")

    @property
    def label(self) -> str:
        return "normal" if self.kind == "normal" else f"{self.kind}{self.value:g}"


@dataclass(frozen=True)
class Effects:
    """The shapes of the seed effect a_s, the shared line effect b_i and the seed x line effect e_si."""

    seed: Shape = Shape()
    line: Shape = Shape()
    interaction: Shape = Shape()


NORMAL = Effects()


def crossed_data(rng: np.random.Generator, reps: int, seeds: int, offset: float, lines: float,
                 n_lines: int = N_LINES, effects: Effects = NORMAL, seed_share: float = SEED_SHARE) -> np.ndarray:
    """(reps, seeds, lines) per-line changes: offset + a_s + b_i + e_si in seed-SD units (sigma_a^2 =
    seed_share, sigma_e^2 / L = 1 - seed_share, sigma_b^2 / L = lines), each part of its Shape."""
    sigma_a = math.sqrt(seed_share)
    sigma_e = math.sqrt((1.0 - seed_share) * n_lines)
    sigma_b = math.sqrt(lines * n_lines)
    return (offset + sigma_a * effects.seed.draw(rng, (reps, seeds, 1)) + sigma_b * effects.line.draw(rng, (reps, 1, n_lines))
            + sigma_e * effects.interaction.draw(rng, (reps, seeds, n_lines)))


def real_estimate(changes: np.ndarray, n_seeds: int, seed) -> Estimate:
    """What a sweep's look decides on, from one replicate's (seeds, lines) changes: its first n_seeds
    seeds as run lines (one token a line, start 0), crossed_ci's bootstrap, estimate_of."""
    n_lines = changes.shape[1]
    zeros, ones = np.zeros(n_lines), np.ones(n_lines)
    runs = [RunLines(zeros, ones, changes[s], ones) for s in range(n_seeds)]
    return estimate_of(crossed_ci(runs, n_resamples=DEFAULT_RESAMPLES, seed=seed))


def anova_estimates(y: np.ndarray, n_seeds: int) -> list[Estimate]:
    """Per replicate, the crossed ANOVA of the first n_seeds seeds: the mean and the parts
    crossed_ci estimates (seed_ms, line_ms, inter_ms as its module doc defines them; the line part >= 0)
    and the third cumulant its line_third is."""
    block = y[:, :n_seeds, :]
    n_lines = block.shape[2]
    seed_means, line_means = block.mean(axis=2), block.mean(axis=1)
    grand = seed_means.mean(axis=1)
    resid = block - seed_means[:, :, None] - line_means[:, None, :] + grand[:, None, None]
    inter_ms = (resid ** 2).sum(axis=(1, 2)) / ((n_seeds - 1) * (n_lines - 1)) / (n_seeds * n_lines)
    seed_ms = seed_means.var(axis=1, ddof=1) / n_seeds
    line_ms = line_means.var(axis=1, ddof=1) / n_lines
    # the third cumulant of the mean from the shared lines: k3 of the line means / L^2 (SeedCI.line_third)
    centred = line_means - line_means.mean(axis=1, keepdims=True)
    third = (centred ** 3).sum(axis=1) * n_lines / ((n_lines - 1) * (n_lines - 2)) / n_lines ** 2
    out = []
    for mean, s_ms, l_ms, i_ms, k3 in zip(grand, seed_ms, line_ms, inter_ms, third):
        parts = CrossedParts(seed=(s_ms - i_ms) * n_seeds, interaction=i_ms * n_seeds,
                             lines=max(0.0, l_ms - i_ms), n_lines=n_lines)
        out.append(Estimate(n_seeds, float(mean), parts, third=float(k3)))
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


def _estimator(y: np.ndarray, design: Design, path: str, seed: tuple[int, ...], earlier: list[Ran] | None):
    """(replicate, seeds) -> the Estimate a look at those seeds decides on: the closed-form ANOVA
    (every seed count at once) or the real path (crossed_ci per replicate and seed count, on demand);
    with `earlier` (a pooling design), its seed variance pooled with theirs."""
    counts = range(design.min_seeds, design.max_seeds + 1)
    pools = None
    if earlier is not None:
        own = seed_sums_of_squares(y)
        pools = {s: _pools(own, earlier, s) for s in counts}
    if path == "closed":
        by_seeds = {s: anova_estimates(y, s) for s in counts}
        raw = lambda r, s: by_seeds[s][r]
    elif path == "real":
        raw = lambda r, s: real_estimate(y[r], s, [*seed, r, s])
    else:
        raise ValueError(f"unknown path {path!r} (known: closed, real)")
    return raw if pools is None else (lambda r, s: pooled(raw(r, s), pools[s][r]))


def _first_decisions(design: Design, y: np.ndarray, decide, earlier: list[Ran] | None = None, path: str = "closed",
                     seed: tuple[int, ...] = ()) -> list[Outcome]:
    """Each replicate's first look whose `decide(estimate)` is not "continue", seeds min..max;
    with `earlier` (a pooling design), on estimates whose seed variance is pooled with theirs."""
    estimate = _estimator(y, design, path, seed, earlier)
    out = []
    for r in range(y.shape[0]):
        for s in range(design.min_seeds, design.max_seeds + 1):
            decision = decide(estimate(r, s))
            if decision != "continue":
                out.append(Outcome(s, decision))
                break
    return out


def sequential_outcomes(design: Design, y: np.ndarray, earlier: list[Ran] | None = None, path: str = "closed",
                        seed: tuple[int, ...] = ()) -> list[Outcome]:
    """Each replicate through tatu's looks: seeds until decided or max_seeds."""
    return _first_decisions(design, y, lambda est: look(design, est, 0.0).decision, earlier, path, seed)


def naive_outcomes(design: Design, y: np.ndarray, earlier: list[Ran] | None = None, path: str = "closed",
                   seed: tuple[int, ...] = ()) -> list[Outcome]:
    """The rule without spending: stop when the 95% CI clears the threshold, on either side."""
    def decide(est: Estimate) -> str:
        if fixed_pass(est, 0.0):
            return "pass"
        return "fail" if fixed_fail(est, 0.0) or est.n_seeds == design.max_seeds else "continue"

    return _first_decisions(design, y, decide, earlier, path, seed)


def fixed_outcomes(design: Design, y: np.ndarray, earlier: list[Ran] | None = None, path: str = "closed",
                   seed: tuple[int, ...] = ()) -> list[Outcome]:
    """The fixed design: max_seeds seeds, the 95% CI's upper bound against the threshold."""
    n = design.max_seeds
    estimates = (anova_estimates(y, n) if path == "closed"
                 else [real_estimate(y[r], n, [*seed, r, n]) for r in range(y.shape[0])])
    return [Outcome(n, "pass" if fixed_pass(est, 0.0) else "fail") for est in estimates]


@dataclass(frozen=True)
class Summary:
    """A design on a scenario: false passes at the threshold (configurations with offset >= 0 that
    passed, over those configurations), the pass rate of the configuration at -1 SD (nan if none),
    the seeds run against the fixed design's max_seeds x configurations, and on the real path the
    share of configurations whose decision and runs the closed form gives alike (nan otherwise)."""

    reps: int
    false_pass: float
    false_pass_se: float
    pass_at_minus1sd: float
    runs_vs_fixed: float
    agreement: float = math.nan


JUDGES = {"sequential": sequential_outcomes, "unpooled": sequential_outcomes, "naive": naive_outcomes,
          "fixed": fixed_outcomes}


def run_scenario(design: Design, scenario: Scenario, reps: int, seed: int, rule: str = "sequential",
                 chunk: int = 2000, path: str = "closed", n_lines: int = N_LINES, effects: Effects = NORMAL) -> Summary:
    """`reps` simulated sweeps of the scenario's configurations under `rule` (sequential | naive | fixed,
    and for a pooling design unpooled: its looks on each configuration's own seeds), on `path`
    (closed | real: module doc), with n_lines lines and the parts' shapes `effects`."""
    judge = JUDGES[rule]
    pools = design.pools_seed_variance and rule in ("sequential", "naive")
    rng = np.random.default_rng(seed)
    null_passes = null_total = minus1_passes = minus1_total = runs = agree = 0
    done = block = 0
    while done < reps:
        n = min(chunk, reps - done)
        earlier: list[Ran] = []
        closed_earlier: list[Ran] = []
        for index, offset in enumerate(scenario.offsets):
            y = crossed_data(rng, n, design.max_seeds, offset, scenario.lines, n_lines, effects)
            outcomes = judge(design, y, earlier if pools else None, path, seed=(seed, block, index))
            if path == "real":  # the closed form on the same data, its pool from its own earlier decisions
                closed = judge(design, y, closed_earlier if pools else None)
                agree += sum(a == b for a, b in zip(outcomes, closed))
                if pools:
                    closed_earlier.append(Ran(seed_sums_of_squares(y), np.array([o.runs for o in closed])))
            if pools:
                earlier.append(Ran(seed_sums_of_squares(y), np.array([o.runs for o in outcomes])))
            runs += sum(o.runs for o in outcomes)
            passes = sum(o.decision == "pass" for o in outcomes)
            if offset >= 0.0:  # the criterion is false: a pass is a false pass
                null_passes, null_total = null_passes + passes, null_total + n
            if offset == -1.0:
                minus1_passes, minus1_total = minus1_passes + passes, minus1_total + n
        done, block = done + n, block + 1
    false_pass = null_passes / null_total if null_total else math.nan
    se = math.sqrt(false_pass * (1 - false_pass) / null_total) if null_total else math.nan
    configs = reps * len(scenario.offsets)
    return Summary(reps, false_pass, se, minus1_passes / minus1_total if minus1_total else math.nan,
                   runs / (configs * design.max_seeds), agree / configs if path == "real" else math.nan)

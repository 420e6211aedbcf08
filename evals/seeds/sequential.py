"""One look of a group-sequential design at a criterion `METRIC_hi < THRESHOLD` of a sweep's rule,
on the crossed CI over seeds x shared lines (evals/seeds/stats.py): pass, fail, futility or continue.

The fixed design passes a criterion when its 95% CI's upper bound is below the threshold: a false
pass (true mean at the threshold) has probability alpha / 2 = 2.5%. A look after each finished seed
with that same 95% CI would pass far more often (every look is another chance: the naive rule,
measured in tests/evals/test_sequential_sim.py). Here the one-sided alpha / 2 is spent over the
looks by a Lan-DeMets function (evals/seeds/spending.py) on the information fraction

    t(S) = Var(S_max) / Var(S),   Var(S) = (sigma_a^2 + sigma_e^2 / L) / S + sigma_b^2 / L   (CrossedParts)

so the shared lines' part, which more seeds do not shrink, counts: when the lines dominate, the
first look already holds nearly all the information there will ever be, and spends nearly all the
alpha. The fraction depends on the parts only through the lines' share of Var(S_max), which is
floored to a step of 1% (LINE_SHARE_STEP): the boundaries are a cached function of a small key,
and a smaller share spends less early (the conservative side).

Each z boundary c_k becomes a bound on the look's t statistic at the same nominal level,
t_{df}(Phi(c_k)), df by Satterthwaite as the CI's (a t interval of few seeds is wider than a z one;
Jennison & Turnbull 2000, sec. 3.8), each bound moved outwards by the skew the shared lines show
(evals/seeds/skew.py). The look's SE takes the seed part at least 0 (Estimate.se: the seed mean
square at least the interaction's), where the crossed CI takes the unbiased one: on the unbiased SE
the looks' t statistics, less correlated from look to look than the normal ones the spending
assumes, passed above the nominal 2.5% at the threshold; the floor holds the level
(bench/sequential.py, docs/sweeps.md; issue 45). With T = (threshold - mean) / SE:
    pass      the CI at the spent level has its upper bound below the threshold;
    fail      the fixed design's (1 - alpha) crossed CI has its lower bound above it: the
              configuration fails the criterion as the fixed design would fail it at these seeds;
    futility  not pass, and the shared lines alone keep a pass out of reach at max_seeds: even the
              mean the look allows at its most favourable bound is within z_{1-alpha/2} x the lines'
              SE of the threshold, and that part of the SE no seed removes ("more lines would"); at
              the last look, the mean itself is within it;
    continue  otherwise.
At the last look (max_seeds, or no information left to gain) a criterion that does not pass fails
(or is futile, with the reason). Fail and futility stops only ever stop without a pass, so they
cannot raise the false-pass rate (non-binding: which is why a fail may stop on the fixed design's
CI, and a configuration clearly over its threshold stops at its first look); the rule's AND of
criteria is an intersection-union test (Berger 1982): each at its own alpha / 2, the conjunction's
false pass is at most that.

min_seeds = 2 (Design.pools_seed_variance): two seeds alone leave the seed variance 1 df, and a t
bound at 1 df is so wide that the first look can hardly decide anything. Such a design pools the
seed variance instead: the look at a configuration's n seeds takes the within-configuration
variance of the per-seed statistics over its own n seeds and the other configurations' finished
seeds (SeedPool: sum of squares about each configuration's own mean over sum of (S_c - 1), the
one-way ANOVA's within mean square), so its df is that sum. It assumes every configuration has the
same seed variance; the means, the interaction and the lines' part stay the configuration's own.
Which members were pooled is the caller's (sweep/sequential/looks.py logs them).
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass
from statistics import NormalDist

from tatu.evals.seeds.power import ALPHA, CrossedParts
from tatu.evals.seeds.skew import lower_above, lower_factor, skewness, upper_below, upper_factor
from tatu.evals.seeds.spending import SHAPES, spending_bounds
from scipy.special import stdtr, stdtrit  # Student's t: stdtr(df, t) its CDF, stdtrit(df, p) its quantile

LINE_SHARE_STEP = 0.01
DECISIONS = ("pass", "fail", "futility", "continue")
DEFAULT_MIN_SEEDS = 3
POOLED_MIN_SEEDS = 2  # a first look this early pools the seed variance across configurations
_Z = NormalDist()


@dataclass(frozen=True)
class Design:
    """`[design]` of a sweep plan: the spending shape, the first look (min_seeds) and the most seeds
    any configuration gets (max_seeds); alpha two-sided as the fixed design's CI (a pass spends alpha / 2)."""

    shape: str
    min_seeds: int
    max_seeds: int
    alpha: float = ALPHA

    def problem(self) -> str | None:
        """Why this design cannot run (None if it can): what the plan's error line says."""
        if self.shape not in SHAPES:
            return f"sequential = {self.shape!r}: unknown design (known: {', '.join(SHAPES)})"
        if self.min_seeds < POOLED_MIN_SEEDS:
            return (f"min_seeds = {self.min_seeds}: the first look needs 2 seeds (3 on a configuration's own; "
                    "2 pool the seed variance across configurations)")
        if self.max_seeds < self.min_seeds:
            return f"max_seeds = {self.max_seeds} is below min_seeds = {self.min_seeds}"
        return None

    @property
    def pools_seed_variance(self) -> bool:
        """Whether its looks pool the seed variance across configurations (the module doc)."""
        return self.min_seeds < DEFAULT_MIN_SEEDS

    def to_json(self) -> dict:
        return {"sequential": self.shape, "min_seeds": self.min_seeds, "max_seeds": self.max_seeds, "alpha": self.alpha}

    @classmethod
    def from_json(cls, doc: dict) -> "Design":
        return cls(doc["sequential"], int(doc["min_seeds"]), int(doc["max_seeds"]), float(doc["alpha"]))


@dataclass(frozen=True)
class Estimate:
    """What a look is decided on: the crossed CI's mean (log scale), its variance parts and df, at n_seeds.
    From a SeedCI (estimate_of) or, in the simulations, from the same ANOVA parts computed directly."""

    n_seeds: int
    mean: float
    parts: CrossedParts
    seed_df: int | None = None  # the seed mean square's df when pooled (SeedPool.df); None: n_seeds - 1
    third: float = 0.0          # the mean's third cumulant from the shared lines (SeedCI.line_third)

    @property
    def se(self) -> float:
        """The look's SE: the seed part at least 0 (CrossedParts.floored), so the seed mean square is at
        least the interaction's. At few seeds this is conservative for one look, and it is what holds
        the sequential design at its level: on the unbiased SE (ci_se) the looks' t statistics, less
        correlated than the normal ones the spending assumes, pass above the nominal level at the
        threshold (the module doc)."""
        return math.sqrt(self.parts.floored().variance(self.n_seeds))

    @property
    def ci_se(self) -> float:
        """The crossed CI's own SE (evals/seeds/stats.crossed_ci: the unbiased seed mean square)."""
        return math.sqrt(self.parts.variance(self.n_seeds))

    @property
    def df(self) -> float:
        return self.parts.df(self.n_seeds, self.seed_df)


def estimate_of(ci) -> Estimate:
    """A SeedCI (evals/seeds/stats.crossed_ci) as what a look needs; it must have >= 2 seeds."""
    if ci.parts is None:
        raise ValueError(f"a look needs the variance parts: {ci.n_seeds} seed(s) have none")
    return Estimate(ci.n_seeds, ci.mean, ci.parts, third=ci.line_third)


@dataclass(frozen=True)
class SeedPool:
    """The seed variance pooled across configurations: the sum of squares of the per-seed
    statistics about their own configuration's mean, its df (sum of S_c - 1) and how many
    configurations gave it (those with 2 seeds or more)."""

    sum_of_squares: float
    df: int
    n_configs: int

    @property
    def variance(self) -> float:
        """One seed's variance, sigma_a^2 + sigma_e^2 / L (what seed + interaction of CrossedParts add to)."""
        return self.sum_of_squares / self.df


def seed_pool(groups) -> SeedPool:
    """Each group: one configuration's per-seed statistics (log scale). A group of one seed adds nothing."""
    total, df, n_configs = 0.0, 0, 0
    for group in groups:
        values = [float(v) for v in group]
        if len(values) < 2:
            continue
        centre = math.fsum(values) / len(values)
        total += math.fsum((v - centre) ** 2 for v in values)
        df, n_configs = df + len(values) - 1, n_configs + 1
    if df == 0:
        raise ValueError("a pooled seed variance needs a configuration with 2 seeds at least")
    return SeedPool(total, df, n_configs)


def pooled(estimate: Estimate, pool: SeedPool) -> Estimate:
    """The look's estimate with its seed part from the pool: the seed mean square becomes
    pool.variance / n (at pool.df), less the configuration's own interaction as crossed_ci's is (not
    floored, as crossed_ci's is not: CrossedParts). The mean, the interaction and the lines' part
    stay the configuration's."""
    parts = estimate.parts
    seed = pool.variance - parts.interaction
    return Estimate(estimate.n_seeds, estimate.mean, CrossedParts(seed, parts.interaction, parts.lines, parts.n_lines),
                    pool.df, estimate.third)


@dataclass(frozen=True)
class Look:
    """One look at one criterion: the data (seeds, mean, SE, df), the threshold (log scale), the
    information fraction, the boundary (z and t) and the decision. What the looks log holds."""

    n_seeds: int
    mean: float
    se: float
    df: float
    threshold: float
    line_share: float   # the lines' share of Var(max_seeds), floored to LINE_SHARE_STEP
    fraction: float     # information fraction t(n_seeds)
    z_bound: float      # the spending boundary (inf: nothing to spend at this look)
    statistic: float    # (threshold - mean) / se: beyond upper_factor(t_bound, skew) passes
    final: bool         # the design's last look for this criterion
    decision: str
    ci_se: float = math.nan  # the crossed CI's own SE (Estimate.ci_se), what a fail is judged on
    third: float = 0.0       # the mean's third cumulant from the shared lines (Estimate.third)
    alpha: float = ALPHA     # the design's two-sided alpha: a fail is the (1 - alpha) CI's lower bound

    @property
    def t_bound(self) -> float:
        """The boundary's nominal level on the t scale at the look's df."""
        return float(stdtrit(self.df, _Z.cdf(self.z_bound))) if math.isfinite(self.z_bound) else math.inf

    @property
    def skew(self) -> float:
        """gamma of the pass bound: the third cumulant over se^3."""
        return skewness(self.third, self.se ** 2)

    @property
    def upper(self) -> float:
        """The upper bound at the spent level (a pass: below the threshold); inf with nothing to spend."""
        bound = self.t_bound
        return self.mean + upper_factor(bound, self.skew) * self.se if math.isfinite(bound) else math.inf

    @property
    def lower(self) -> float:
        """The fixed design's (1 - alpha) lower bound at these seeds (a fail: above the threshold)."""
        return self.mean - lower_factor(float(stdtrit(self.df, 1.0 - self.alpha / 2.0)),
                                        skewness(self.third, self.ci_se ** 2)) * self.ci_se

    def to_json(self) -> dict:
        """Every field, and t_bound for the reader (recomputed from z_bound and df, never read back)."""
        return {**{k: _finite(getattr(self, k)) for k in self.__dataclass_fields__}, "t_bound": _finite(self.t_bound)}

    @classmethod
    def from_json(cls, doc: dict) -> "Look":
        """A line as logged; one logged before ci_se, third and alpha were (issue 45) reads with their
        defaults, so a recomputation tells it apart (a changed look), rather than a KeyError."""
        fields = {k: f for k, f in cls.__dataclass_fields__.items() if k in doc or f.default is MISSING}
        return cls(**{k: (doc[k] if k in ("decision", "final", "n_seeds") else float(doc[k])) for k in fields})  # float("inf") reads "inf"


def _finite(value):
    """JSON has no inf: "inf" stands for it (a boundary with nothing to spend)."""
    return "inf" if isinstance(value, float) and math.isinf(value) else value


def line_share(parts: CrossedParts, max_seeds: int) -> float:
    """The shared lines' share of the variance at max_seeds, floored to LINE_SHARE_STEP."""
    total = parts.floored().variance(max_seeds)
    share = parts.lines / total if total > 0 else 1.0
    return math.floor(share / LINE_SHARE_STEP + 1e-9) * LINE_SHARE_STEP


def fractions(design: Design, share: float, n_seeds: int) -> tuple[float, ...]:
    """Information fractions of the looks at min_seeds .. n_seeds: Var(max) / Var(S) with the lines'
    share of Var(max) = share, i.e. 1 / ((1 - share) max / S + share)."""
    return tuple(min(1.0, 1.0 / ((1.0 - share) * design.max_seeds / s + share))
                 for s in range(design.min_seeds, n_seeds + 1))


def look(design: Design, estimate: Estimate, threshold: float) -> Look:
    """The decision on `METRIC_hi < threshold` (log scale) at estimate.n_seeds seeds."""
    n = estimate.n_seeds
    if not design.min_seeds <= n <= design.max_seeds:
        raise ValueError(f"a look at {n} seeds: the design looks from {design.min_seeds} to {design.max_seeds}")
    share = line_share(estimate.parts, design.max_seeds)
    fracs = fractions(design, share, n)
    bound = spending_bounds(design.shape, fracs, design.alpha / 2.0)[-1]
    se, df = estimate.se, estimate.df
    level = _Z.cdf(bound) if math.isfinite(bound) else 1.0  # the one-sided nominal level the boundary spends at
    gap = threshold - estimate.mean
    statistic = gap / se if se > 0 else math.copysign(math.inf, gap) if gap else 0.0
    gamma = skewness(estimate.third, se * se)
    final = n == design.max_seeds or fracs[-1] >= 1.0
    # decided through stdtr (one incomplete beta each), not a quantile search: most looks need none
    passes = upper_below(statistic, df, level, gamma)
    fails = fixed_fail(estimate, threshold, design.alpha)
    # the lines' SE no seed removes, against the most favourable mean this look allows (at the last
    # look: its own mean, as every seed in the world would leave it)
    line_margin = _Z.inv_cdf(1.0 - design.alpha / 2.0) * math.sqrt(estimate.parts.lines)
    if final:
        futile = gap < line_margin
    else:  # the bound's factor is at least its t quantile, which is at least the z one
        futile = (level < 1.0 and gap + bound * se < line_margin
                  and gap + upper_factor(float(stdtrit(df, level)), gamma) * se < line_margin)
    if passes:
        decision = "pass"
    elif fails or (final and not futile):
        decision = "fail"
    elif futile or final:
        decision = "futility"
    else:
        decision = "continue"
    return Look(n, estimate.mean, se, df, threshold, share, fracs[-1], bound, statistic, final, decision,
                estimate.ci_se, estimate.third, design.alpha)


def _ci_statistic(estimate: Estimate, threshold: float) -> tuple[float, float]:
    """(threshold - mean) / ci_se and the skew at ci_se: the fixed CI's own scale."""
    se, gap = estimate.ci_se, threshold - estimate.mean
    statistic = gap / se if se > 0 else math.copysign(math.inf, gap) if gap else 0.0
    return statistic, skewness(estimate.third, se * se)


def fixed_pass(estimate: Estimate, threshold: float, alpha: float = ALPHA) -> bool:
    """The fixed design's criterion at its seeds: the (1 - alpha) crossed CI's upper bound below the threshold."""
    statistic, gamma = _ci_statistic(estimate, threshold)
    return upper_below(statistic, estimate.df, 1.0 - alpha / 2.0, gamma)


def fixed_fail(estimate: Estimate, threshold: float, alpha: float = ALPHA) -> bool:
    """The (1 - alpha) crossed CI's lower bound above the threshold."""
    statistic, gamma = _ci_statistic(estimate, threshold)
    return lower_above(statistic, estimate.df, 1.0 - alpha / 2.0, gamma)

"""How many seeds are enough: the variance parts of a crossed design (seeds x shared lines,
evals/seeds/stats.py) projected to other seed counts. The one home of the formula.

From the measured parts, the mean over S seeds on these L lines has
    Var(S) = (sigma_a^2 + sigma_e^2/L) / S + sigma_b^2 / L                 (CrossedParts)
with Satterthwaite's df(S) as crossed_ci computes it (the seed mean square at S - 1 df even where the
seed part is measured at or below 0, the smaller df of it at its estimate and at its 65% upper
confidence limit, SEED_UCL_LEVEL: stats.py's module doc says why; CrossedParts.df). Projected from the measured parts, that limit makes df(S) the df
the CI would compute were its mean squares to come out at these values. Its 95% CI excludes a true effect delta
(from zero, or from a rule's threshold) with power 1 - beta when
    delta >= (t_{0.975, df(S)} + t_{1-beta, df(S)}) * sqrt(Var(S))          (crossed_mde),
and seeds_needed is the fewest S >= 2 that satisfies it. The line part does not shrink with S:
with every seed in the world the MDE tends to (t + t at df L - 1) * sigma_b / sqrt(L) (line_floor).
That limit is not a floor at a finite S: Satterthwaite's df there can exceed L - 1 (the seed
part adds its own), so with few lines crossed_mde dips below it on the way. seeds_needed
therefore answers "none" only from a bound that holds for every S it skips (mde_at_least: the
variance at the interval's end, the t quantiles at a df no seed count in it exceeds), never from
the limit. Measured against simulated crossed experiments and a plain loop over S:
tests/evals/test_seeds_power.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.special import chdtri, stdtr, stdtrit  # Student's t: stdtr(df, t) its CDF, stdtrit(df, p) its quantile;
# chdtri(k, p): the chi-square quantile of k df with upper tail p

ALPHA = 0.05  # the two-sided level of every CI the sweep report prints (95%)
POWER = 0.8   # the power "seeds for MDE" is stated at
SEED_UCL_LEVEL = 0.65  # the seed mean square enters Satterthwaite's df at this upper confidence limit (module doc)


@dataclass(frozen=True)
class CrossedParts:
    """What the variance of a mean over seeds on L shared lines is made of (the module doc's
    sigma_a^2, sigma_e^2, sigma_b^2), as measured by crossed_ci, so it can be projected to other
    seed counts: seed = sigma_a^2 (one seed's own effect); interaction = sigma_e^2 / L (one seed's
    seed x line noise on these lines); lines = sigma_b^2 / L (the shared lines' part of the mean,
    the same at any seed count); n_lines = L.

    seed is the unbiased estimate, below 0 when the seeds scatter less than their seed x line noise
    alone would make them: seed + interaction is then the per-seed statistics' own variance (what a t
    over seeds uses), and flooring seed at 0 would put the interaction's variance in its place. The
    lines part is floored at 0 (a shared-line variance the lines cannot show is left out)."""

    seed: float
    interaction: float
    lines: float
    n_lines: int

    def variance(self, n_seeds: int) -> float:
        """Var of the mean over n_seeds seeds: (sigma_a^2 + sigma_e^2/L) / S + sigma_b^2 / L."""
        return (self.seed + self.interaction) / n_seeds + self.lines

    def floored(self) -> "CrossedParts":
        """The parts with the seed part at least 0 (sigma_a^2 >= 0): what the expected mean squares are
        estimated from (df, a sequential look's SE and information fraction)."""
        return self if self.seed >= 0.0 else CrossedParts(0.0, self.interaction, self.lines, self.n_lines)

    def _mean_squares(self, n_seeds: float, seed_df: float | None = None, limit: bool = True) -> tuple[float, float, float]:
        """The seed, line and interaction mean squares of the mean at n_seeds, as Satterthwaite's df
        weighs them: the seed one at least the interaction's (sigma_a^2 >= 0: a seed part measured at or
        below 0 handed the interaction's (S - 1)(L - 1) df to the interval before issue 45) and, with
        `limit`, at its one-sided SEED_UCL_LEVEL upper confidence limit (chi-square at seed_df,
        n_seeds - 1 unless pooled)."""
        inter_ms = self.interaction / n_seeds
        k = n_seeds - 1 if seed_df is None else seed_df
        seed_ms = max(self.seed + self.interaction, 0.0) / n_seeds * (seed_ucl_factor(k) if limit else 1.0)
        return max(seed_ms, inter_ms), self.lines + inter_ms, inter_ms

    def df(self, n_seeds: int, seed_df: int | None = None) -> float:
        """Satterthwaite's df at n_seeds (what crossed_ci's interval uses): the seed mean square at
        n_seeds - 1 df (seed_df: its own df when it was pooled across configurations,
        evals/seeds/sequential.SeedPool), the line part, where measured above 0, as the line mean square
        less the interaction's; the smaller of the df with the seed mean square at its estimate and at
        its upper confidence limit (_mean_squares), so a chance agreement of the seeds cannot buy df.
        Satterthwaite's df is unimodal in one term (it rises to a peak and falls back to that term's df),
        so the smaller end is the least df over every seed mean square between the two: the limit alone
        would raise the df where the lines have fewer df than the seeds (a category of 3 lines)."""
        k = n_seeds - 1 if seed_df is None else seed_df
        return min(self._df_at(n_seeds, k, False), self._df_at(n_seeds, k, True))

    def _df_at(self, n_seeds: int, k: float, limit: bool) -> float:
        seed_ms, line_ms, inter_ms = self._mean_squares(n_seeds, k, limit)
        c_line = float(self.lines > 0)
        total = seed_ms + c_line * (line_ms - inter_ms)
        return _satterthwaite_df([(seed_ms, k), (c_line * line_ms, self.n_lines - 1),
                                  (-c_line * inter_ms, (n_seeds - 1) * (self.n_lines - 1))], total)


def seed_ucl_factor(seed_df: float) -> float:
    """How far above its estimate the seed mean square's one-sided SEED_UCL_LEVEL upper confidence
    limit lies: seed_df / chi2_{1 - SEED_UCL_LEVEL}(seed_df); 1 at infinite df and where there is no
    seed term (one seed: 0 df)."""
    if math.isinf(seed_df) or seed_df <= 0:
        return 1.0
    return float(seed_df / chdtri(seed_df, SEED_UCL_LEVEL))


def _satterthwaite_df(parts: list[tuple[float, float]], total: float) -> float:
    """df of a variance that is a signed sum of mean-square terms, each (its term, its df)."""
    spread = sum(value ** 2 / df for value, df in parts if value != 0.0 and math.isfinite(df))
    return total ** 2 / spread if spread > 0 else math.inf


def crossed_mde(parts: CrossedParts, n_seeds: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true effect (log scale) that the (1 - alpha) crossed CI of n_seeds seeds on these
    lines excludes with `power`: (t_{1-alpha/2} + t_{power}) * sqrt(Var), both at df(n_seeds).
    power 0.5 gives the CI's expected half-width (the estimate and the spread holding)."""
    if n_seeds < 2:
        return math.inf
    df = parts.df(n_seeds)
    return float(stdtrit(df, 1.0 - alpha / 2.0) + stdtrit(df, power)) * math.sqrt(parts.variance(n_seeds))


def crossed_power(parts: CrossedParts, n_seeds: int, effect: float, alpha: float = ALPHA) -> float:
    """The power crossed_mde inverts: P(T_df > t_{1-alpha/2} - |effect| / SE) at n_seeds."""
    df, se = parts.df(n_seeds), math.sqrt(parts.variance(n_seeds))
    if se == 0.0:
        return 1.0 if effect != 0.0 else 0.0
    return float(stdtr(df, abs(effect) / se - stdtrit(df, 1.0 - alpha / 2.0)))


def line_floor(parts: CrossedParts, alpha: float = ALPHA, power: float = POWER) -> float:
    """crossed_mde with every seed in the world: what the shared lines alone allow (df L - 1).
    The limit as S grows, not a lower bound at every S (see the module doc)."""
    df = parts.n_lines - 1
    return float(stdtrit(df, 1.0 - alpha / 2.0) + stdtrit(df, power)) * math.sqrt(parts.lines)


MAX_SEEDS = 1 << 20  # past this, seeds_needed answers None (no seed count an operator would run)


def _df_ceiling(parts: CrossedParts, low: int, high: float) -> float:
    """A df that no seed count S in [low, high] exceeds: the df with the seed mean square at its limit
    (CrossedParts.df takes at most that), whose numerator (CrossedParts._mean_squares) is largest at
    `low` and each term of whose denominator is smallest at `high` (high may be inf)."""
    seed_lo, line_lo, inter_lo = parts._mean_squares(low)
    seed_hi, line_hi, inter_hi = parts._mean_squares(high)
    c_line = float(parts.lines > 0)
    spread = (seed_hi ** 2 / (high - 1) + (c_line * line_hi) ** 2 / (parts.n_lines - 1)
              + (c_line * inter_hi) ** 2 / ((high - 1) * (parts.n_lines - 1)))
    return (seed_lo + c_line * (line_lo - inter_lo)) ** 2 / spread if spread > 0 else math.inf


def mde_at_least(parts: CrossedParts, low: int, high: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """A lower bound on crossed_mde(S) for every S in [low, high] (high may be inf): the variance at
    high (it falls with S), the t quantiles at _df_ceiling (they fall with df). Needs power >= 0.5."""
    df = _df_ceiling(parts, low, high)
    variance = parts.lines if math.isinf(high) else parts.variance(int(high))
    return float(stdtrit(df, 1.0 - alpha / 2.0) + stdtrit(df, power)) * math.sqrt(variance)


def _fewest_in(parts: CrossedParts, low: int, high: int, effect: float, alpha: float, power: float) -> int | None:
    """The fewest S in [low, high] with crossed_mde(S) <= effect, skipping every part of the range
    whose lower bound (mde_at_least) is already above the effect."""
    if mde_at_least(parts, low, high, alpha, power) > effect:
        return None
    if high - low < 4:
        return next((n for n in range(low, high + 1) if crossed_mde(parts, n, alpha, power) <= effect), None)
    mid = (low + high) // 2
    found = _fewest_in(parts, low, mid, effect, alpha, power)
    return found if found is not None else _fewest_in(parts, mid + 1, high, effect, alpha, power)


def seeds_needed(parts: CrossedParts, effect: float, power: float = POWER, alpha: float = ALPHA) -> int | None:
    """The fewest seeds (at least 2) whose crossed CI resolves `effect` (log scale) with `power`;
    None when no number of seeds does with these lines (more lines would), or none up to MAX_SEEDS.

    crossed_mde need not fall monotonically with S (its df can rise above the limit's and come
    back), so the seed counts are searched in doubling blocks [2^k, 2^(k+1) - 1], each pruned by
    mde_at_least, and the search stops once mde_at_least over [2^k, inf) is above the effect."""
    if not 0.5 <= power < 1.0:
        raise ValueError(f"power must be in [0.5, 1), got {power!r}")
    effect = abs(effect)
    low = 2
    while low <= MAX_SEEDS:
        if mde_at_least(parts, low, math.inf, alpha, power) > effect:
            return None
        found = _fewest_in(parts, low, 2 * low - 1, effect, alpha, power)
        if found is not None:
            return found
        low *= 2
    return None

"""Statistics across seeds: results that carry seed-to-seed AND line-level variance.

A sweep's member run r (one configuration at one TATU_SEED) is scored on the same lines at
its start and at its end. Its statistic is the paired log ratio of corpus perplexities,
    t_r = sum nll_end / sum tok_end - sum nll_base / sum tok_base      (log(ppl_end / ppl_base)),
so drift = exp(t) - 1 for enRuler and the sftHeld change = exp(t) - 1 for sftHeld. Two
sources make t vary: which seed ran (the stream order, the init of nothing else: seed-to-seed
variance sigma_s^2) and which lines happen to be in the eval set (line variance, the
within-run standard error se_r, known from resampling lines).

The CI of the mean over S seeds is a hierarchical bootstrap (resample seeds, then lines
within each drawn seed), with the two corrections a two-stage bootstrap needs to cover at
its stated rate:
- Reflated seed effects (Carpenter, Goldstein & Rasbash 2003). The observed per-seed
  estimates already contain line noise: their variance estimates sigma_s^2 + W, W the mean
  within-run line variance. Resampling them and then the lines again would count W twice
  (the CI over-covers when lines dominate). So the top level resamples the estimates shrunk
  towards their mean until their spread is sigma_s^2 = max(0, Var(estimates) - W), and the
  bottom level adds each drawn seed's own line-bootstrap deviation.
- Few seeds. The percentile interval of a mean of S draws is too narrow by sqrt(S/(S-1))
  and by a normal instead of a t quantile (Hesterberg's expanded percentile interval). The
  replicate deviations are scaled by sqrt(S/(S-1)) * t_df / z, with Satterthwaite's df for
  a variance whose seed part has S-1 degrees of freedom and whose line part is known.
Measured coverage on synthetic sweeps with known sigma_s and line variance:
tests/evals/test_seeds.py (and docs/sweeps.md, "The answer: statistics across seeds").

Between configurations, results are paired by seed (the same TATU_SEED draws the same stream
order): d_s = t(config, s) - t(baseline, s). The p-value is the paired t-test over seeds
(what scipy.stats.ttest_rel computes; tested against it); the CI of the mean difference is
the same hierarchical bootstrap, lines resampled jointly for both runs of a seed (they are
scored on the same lines). Several configurations against one baseline: Holm's step-down
adjustment. A seed far from the others is flagged by a robust z (median / MAD), never dropped.

Student's t distribution is computed here (regularized incomplete beta), so evals/ needs
numpy only; tests compare it with scipy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from tatu.evals.stats import _line_sums, _resampled_sums

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
OUTLIER_Z = 3.5  # Iglewicz & Hoaglin's cut for the modified z score
_Z = NormalDist()


# --- Student's t ------------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float, one_minus_x: float) -> float:
    """Regularized incomplete beta I_x(a, b); 1 - x is passed exactly (no cancellation near 1)."""
    if x <= 0.0:
        return 0.0
    if one_minus_x <= 0.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(one_minus_x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, one_minus_x) / b


def t_cdf(t: float, df: float) -> float:
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    if df > 1e7:
        return _Z.cdf(t)
    if t == 0.0:
        return 0.5
    # Near t = 0 the tail is 1/2 minus a small term: compute that term directly.
    x, one_minus_x = df / (df + t * t), t * t / (df + t * t)
    if x > 0.5:
        small = 0.5 * _betainc(0.5, df / 2.0, one_minus_x, x)
        return 0.5 + small if t > 0 else 0.5 - small
    tail = 0.5 * _betainc(df / 2.0, 0.5, x, one_minus_x)
    return 1.0 - tail if t > 0 else tail


def t_ppf(p: float, df: float) -> float:
    """Quantile of Student's t (bisection on t_cdf: exact to ~1e-12, fast enough for reports)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df > 1e7:
        return _Z.inv_cdf(p)
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > p:
        lo *= 2.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, abs(mid)):
            break
    return 0.5 * (lo + hi)


# --- one run: its paired log ratio and line replicates -------------------------------------------

@dataclass(frozen=True)
class RunLines:
    """One run's per-line sums on one eval set at its start and at its end (the same lines)."""

    nll_base: np.ndarray
    tok_base: np.ndarray
    nll_end: np.ndarray
    tok_end: np.ndarray

    def __post_init__(self):
        nb, tb = _line_sums(self.nll_base, self.tok_base, "nll_base", "tok_base")
        ne, te = _line_sums(self.nll_end, self.tok_end, "nll_end", "tok_end")
        if nb.size != ne.size:
            raise ValueError(f"start and end must score the same lines: {nb.size} vs {ne.size}")
        for name, value in (("nll_base", nb), ("tok_base", tb), ("nll_end", ne), ("tok_end", te)):
            object.__setattr__(self, name, value)

    @property
    def n_lines(self) -> int:
        return int(self.nll_base.size)

    def log_ratio(self) -> float:
        return float(self.nll_end.sum() / self.tok_end.sum() - self.nll_base.sum() / self.tok_base.sum())


def line_replicates(runs: list[RunLines], n_resamples: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Bootstrap replicates of each run's log ratio from ONE shared draw of line indices.

    Pass the runs of one seed that are compared (config and baseline: the same lines) so
    their replicates are paired; a single run gives its own line-level distribution."""
    n = runs[0].n_lines
    if any(r.n_lines != n for r in runs):
        raise ValueError("runs compared within a seed must be scored on the same lines")
    columns = [c for r in runs for c in (r.nll_base, r.tok_base, r.nll_end, r.tok_end)]
    sums = _resampled_sums(rng, n, n_resamples, columns)
    return [sums[4 * i + 2] / sums[4 * i + 3] - sums[4 * i] / sums[4 * i + 1] for i in range(len(runs))]


# --- the hierarchical bootstrap -----------------------------------------------------------------

@dataclass(frozen=True)
class SeedCI:
    """Mean over seeds of a per-run statistic (log scale), its CI, and where its variance comes from.

    seed_sd: the SD of the per-seed estimates (what a new seed would scatter by, line noise
    included); seed_effect_sd: their SD with the line noise removed (sigma_s); within_se: the
    root-mean-square within-run SE from resampling lines; mde: the smallest mean effect S seeds
    detect at 80% power, two-sided alpha 0.05."""

    mean: float
    lo: float
    hi: float
    se: float
    seed_sd: float
    seed_effect_sd: float
    within_se: float
    df: float
    n_seeds: int
    mde: float


def _satterthwaite_df(seed_part: float, line_part: float, n_seeds: int) -> float:
    if seed_part <= 0.0:
        return math.inf
    return (seed_part + line_part) ** 2 / (seed_part ** 2 / (n_seeds - 1))


def hierarchical_ci(estimates, replicates, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                    level: float = 0.95) -> SeedCI:
    """CI of the mean over seeds (see the module doc).

    estimates[s]: the statistic of seed s; replicates[s]: its line-bootstrap replicates
    (any number per seed, e.g. from line_replicates)."""
    est = np.asarray(estimates, dtype=np.float64)
    n_seeds = int(est.size)
    if n_seeds < 1:
        raise ValueError("no seeds: a mean over seeds needs at least one")
    if len(replicates) != n_seeds:
        raise ValueError(f"{n_seeds} estimates but {len(replicates)} sets of line replicates")
    if not np.all(np.isfinite(est)):
        raise ValueError(f"estimates must be finite, got {est.tolist()}")
    reps = [np.asarray(r, dtype=np.float64) for r in replicates]
    if any(r.ndim != 1 or r.size < 2 for r in reps):
        raise ValueError("each seed needs at least 2 line replicates")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1, got {level!r}")
    mean = float(est.mean())
    within_var = float(np.mean([r.var(ddof=1) for r in reps]))
    between_var = float(est.var(ddof=1)) if n_seeds > 1 else 0.0
    seed_var = max(0.0, between_var - within_var)
    rng = np.random.default_rng(seed)
    # Reflated seed effects: the spread of `effects` is sigma_s^2, the line part comes below.
    shrink = math.sqrt(seed_var / between_var) if between_var > 0 else 0.0
    effects = mean + shrink * (est - mean)
    drawn = rng.integers(0, n_seeds, size=(n_resamples, n_seeds))
    deviations = np.empty((n_resamples, n_seeds))
    for s in range(n_seeds):
        mask = drawn == s
        picks = rng.integers(0, reps[s].size, size=int(mask.sum()))
        deviations[mask] = reps[s][picks] - est[s]
    replicate_means = (effects[drawn] + deviations).mean(axis=1) - mean
    seed_part, line_part = seed_var / n_seeds, within_var / n_seeds
    df = _satterthwaite_df(seed_part, line_part, n_seeds) if n_seeds > 1 else math.inf
    z = _Z.inv_cdf(0.5 + level / 2.0)
    expand = math.sqrt(n_seeds / (n_seeds - 1)) * t_ppf(0.5 + level / 2.0, df) / z if seed_part > 0 else 1.0
    tail = (1.0 - level) / 2.0
    q_lo, q_hi = np.quantile(replicate_means, [tail, 1.0 - tail])
    se = float(replicate_means.std(ddof=1)) * (math.sqrt(n_seeds / (n_seeds - 1)) if seed_part > 0 else 1.0)
    return SeedCI(
        mean=mean, lo=mean + expand * float(q_lo), hi=mean + expand * float(q_hi), se=se,
        seed_sd=math.sqrt(between_var), seed_effect_sd=math.sqrt(seed_var), within_se=math.sqrt(within_var),
        df=df, n_seeds=n_seeds, mde=seeds_mde(math.sqrt(max(between_var, within_var)), n_seeds),
    )


# --- between configurations, paired by seed --------------------------------------------------------

@dataclass(frozen=True)
class PairedTest:
    mean_diff: float
    t: float
    df: int
    p_value: float
    n_seeds: int


def paired_t(a, b) -> PairedTest:
    """Paired t-test of a - b over seeds (a[s] and b[s] ran with the same seed)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired values need equal 1-D shapes, got {a.shape} and {b.shape}")
    n = int(a.size)
    if n < 2:
        raise ValueError(f"a paired test over seeds needs at least 2 seeds, got {n}")
    d = a - b
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        t = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
        p = 1.0 if mean == 0.0 else 0.0
    else:
        t = mean / (sd / math.sqrt(n))
        p = min(1.0, 2.0 * t_cdf(-abs(t), n - 1))
    return PairedTest(mean_diff=mean, t=t, df=n - 1, p_value=p, n_seeds=n)


def holm(p_values) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the order given."""
    p = [float(x) for x in p_values]
    if any(not 0.0 <= x <= 1.0 for x in p):
        raise ValueError(f"p-values must lie in [0, 1], got {p}")
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def robust_z(values) -> list[float]:
    """Modified z scores (x - median) / (1.4826 MAD); with MAD 0, the mean absolute deviation
    (times 1.2533) stands in; all equal -> all 0."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return []
    median = float(np.median(x))
    dev = np.abs(x - median)
    mad = float(np.median(dev))
    if mad > 0:
        scale = 1.4826 * mad
    else:
        mean_ad = float(dev.mean())
        if mean_ad == 0:
            return [0.0] * int(x.size)
        scale = 1.2533 * mean_ad
    return [float(v) for v in (x - median) / scale]


def outliers(values, cut: float = OUTLIER_Z) -> list[int]:
    """Indices whose robust z exceeds `cut` in absolute value (needs >= 3 values to mean anything)."""
    if len(values) < 3:
        return []
    return [i for i, z in enumerate(robust_z(values)) if abs(z) > cut]


def seeds_mde(sd: float, n_seeds: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest mean effect (log scale) a paired test over n_seeds detects with `power`:
    (t_{1-alpha/2} + t_{power}) * sd / sqrt(n), df = n - 1."""
    if n_seeds < 2:
        return math.inf
    df = n_seeds - 1
    return (t_ppf(1 - alpha / 2, df) + t_ppf(power, df)) * sd / math.sqrt(n_seeds)


def seeds_needed(effect: float, sd: float, most: int = 1000) -> int | None:
    """Seeds a paired comparison needs to detect `effect` (log scale) at 80% power; None if > most."""
    if sd == 0.0:
        return 2
    for n in range(2, most + 1):
        if seeds_mde(sd, n) <= abs(effect):
            return n
    return None

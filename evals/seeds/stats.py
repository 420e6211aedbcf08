"""Statistics across seeds: results that carry seed-to-seed AND line-level variance.

A sweep's member run r (one configuration at one TATU_SEED) is scored on the same lines at
its start and at its end. Its statistic is the paired log ratio of corpus perplexities,
    t_r = sum nll_end / sum tok_end - sum nll_base / sum tok_base      (log(ppl_end / ppl_base)),
so drift = exp(t) - 1 for enRuler and the sftHeld change = exp(t) - 1 for sftHeld.

Every seed is scored on the SAME lines: the design is crossed, seeds x lines. Per line, the
change is mu + a_s (the seed: its stream order) + b_i (the line, shared by every seed: a set
that happens to hold lines the training helps) + e_si (seed x line). The mean over S seeds of
L lines then varies by
    Var = sigma_a^2 / S + sigma_b^2 / L + sigma_e^2 / (S L),
and the line part sigma_b^2 / L does not shrink with more seeds. Resampling lines separately
within each seed treats b_i as if each seed had drawn its own lines: it divides that part by
S as well, and the interval is too narrow when lines matter (tests/evals/test_seeds_crossed.py
measures it).

crossed_ci: a crossed bootstrap, each replicate resampling the seeds and drawing ONE set of
line indices shared by every seed (and, for a comparison, by both configurations of a seed).
Resampling both at once counts the interaction three times (Owen 2007, "The pigeonhole
bootstrap"), so the replicates are split into what varies with the seeds drawn (exact: the
seeds' estimates), with the lines drawn (the seed mean on each line draw) and what is left
(seed x line); each gives its mean square of the two-way ANOVA, on the real ratio statistic.
Var above is the seed mean square (the per-seed statistics' variance / S: sigma_a^2/S +
sigma_e^2/(S L), unbiased) plus the line part (its mean square less the interaction's, at least 0).
The interval is mean +- t_df * SE, df by Satterthwaite with the seed mean square at S - 1 df
always (seeds alone: the t interval over seeds); each expected mean square in the df is estimated
under its constraint (the seed one at least the interaction's: power.CrossedParts.df), and the df
is the smaller of those with the seed one at its estimate and at its one-sided 65% upper confidence
limit (chi-square at S - 1 df). Why: Satterthwaite's df from
the estimated mean squares is largest exactly when the few seeds agree by chance, so a small seed
mean square came with a small t quantile too; at 3 seeds carrying nearly all the variance each bound
missed 3.3-3.7% (tests/evals/test_seeds_crossed.py's seed-dominated regime; 3.6% in the closed form
where the lines hold 7-15% of it). At its upper limit a chance agreement cannot buy df; where the seed
term is the only one the df is S - 1 whatever the limit (the smaller of the two: where the lines have
fewer df than the seeds, the limit alone would raise it). 65% is measured, not derived: the smallest
limit that held every one-sided miss within 2.5% + 2 MC SEs over seed shares 0.7-0.99 and line shares
1-60% at 3 seeds (a 95% limit widened the "both" regime's interval by half at 3 seeds; docs/sweeps.md).
A seed
part floored at 0 in the variance with the seed term dropped from the df (tatu before issue 45)
put the interaction's (S - 1)(L - 1) df where the seeds' S - 1 belonged: at 3 seeds, a quarter
of the time, an SE without the seed variance against a nearly normal bound.
Measured coverage per regime (seed-, shared-line-dominated, both, neither; 3 and 5 seeds):
tests/evals/test_seeds_crossed.py and docs/sweeps.md.

Between configurations, results are paired by seed (the same TATU_SEED draws the same stream
order) and by line: d_s = t(config, s) - t(baseline, s), the same crossed CI on d. Its p-value
comes from the same parts as the interval, 2 * stdtr(df, -|mean| / SE) at Satterthwaite's df, so
p < 1 - level exactly when the CI excludes zero (a paired t over seeds alone would leave out the
shared lines' variance and could disagree with the CI printed beside it:
tests/evals/test_seeds_crossed.py). Several configurations against one baseline: Holm's step-down
adjustment.

A seed far from the others is flagged, never dropped: its leave-one-out t (against the mean
and SD of the other seeds) beyond a Bonferroni cut over the seeds at family level 4%, so normal
seeds get a flag in at most 4% of configuration-metrics at any seed count >= 3 (exact t, tested
by simulation at 3, 5 and 10 against the 5% the report promises). The median/MAD z it replaces flagged 29% of three normal seeds.

How many seeds are enough: evals/seeds/power.py projects the parts crossed_ci measures
(CrossedParts) to other seed counts.

Student's t is scipy.special's (stdtr, stdtrit).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tatu.evals.stats import _CHUNK_ENTRIES, _line_sums
from tatu.evals.seeds.power import CrossedParts, crossed_mde
from tatu.evals.seeds.skew import hall, k_statistic_3, lower_factor, skewness, upper_factor
from scipy.special import stdtr, stdtrit  # Student's t: stdtr(df, t) its CDF, stdtrit(df, p) its quantile

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
OUTLIER_MIN_SEEDS = 4  # the fewest seeds a flag is raised at: the others' spread then has 2 df
OUTLIER_ALPHA = 0.04  # bounds the chance that normal seeds get any flag (per configuration-metric): <= 5% measured


# --- one run: its paired log ratio --------------------------------------------------------------

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


# --- the crossed design: seeds x shared lines ------------------------------------------------------

@dataclass(frozen=True)
class SeedCI:
    """Mean over seeds of a per-run statistic (log scale), its CI, and where its variance comes from.

    seed_sd: the SD of the per-seed estimates (what a new seed would scatter by, its line x seed
    noise included); seed_effect_sd: their SD with that noise removed (sigma_a); within_se: the
    root-mean-square SE of one run from resampling its lines; shared_line_se: the part of the
    mean's SE that comes from which lines the set holds (the same for every seed: more seeds do
    not shrink it); interaction_se: the seed x line part; se: the mean's SE (all three parts);
    mde: the smallest true effect this CI excludes at 80% power (crossed_mde at S; inf below 2
    seeds); parts: the variance components (None below 2 seeds: the seed part is unknown);
    p_value: the two-sided p of "the mean is 0" from the same SE, df and skew as the interval;
    line_third: the third cumulant of the mean from the shared lines (k3 of the per-line changes
    averaged over seeds, / L^2); line_skew: those per-line changes' own skewness (k3 / SD^3), what an
    operator compares with the simulated range (evals/seeds/guarantee.py)."""

    mean: float
    lo: float
    hi: float
    se: float
    seed_sd: float
    seed_effect_sd: float
    within_se: float
    shared_line_se: float
    interaction_se: float
    df: float
    n_seeds: int
    mde: float
    parts: CrossedParts | None = None
    p_value: float = math.nan
    line_third: float = 0.0
    line_skew: float = 0.0

    @property
    def skew(self) -> float:
        """The gamma the interval's bounds are corrected by: the skewness of the mean the shared lines
        show (line_third / se^3) times evals/seeds/skew.SKEW_INFLATION."""
        return skewness(self.line_third, self.se ** 2)


def _check_crossed(runs: list[RunLines], baseline: list[RunLines] | None) -> int:
    if not runs:
        raise ValueError("no seeds: a mean over seeds needs at least one")
    if baseline is not None and len(baseline) != len(runs):
        raise ValueError(f"{len(runs)} runs but {len(baseline)} baseline runs: pair them by seed")
    n_lines = runs[0].n_lines
    if any(r.n_lines != n_lines for r in runs + (baseline or [])):
        raise ValueError("every seed must be scored on the same lines (a crossed design): line counts differ")
    return n_lines


def line_replicates(runs: list[RunLines], baseline: list[RunLines] | None, n_resamples: int,
                    rng: np.random.Generator) -> np.ndarray:
    """(seeds, n_resamples): each seed's statistic on ONE draw of line indices per replicate,
    shared by every seed and by the baseline (the lines are the same for all of them)."""
    n_lines = _check_crossed(runs, baseline)
    both = runs + (baseline or [])
    columns = np.stack([c for r in both for c in (r.nll_base, r.tok_base, r.nll_end, r.tok_end)], axis=1)
    sums = _shared_draw_sums(rng, n_lines, n_resamples, columns)
    ratios = np.array([sums[:, 4 * i + 2] / sums[:, 4 * i + 3] - sums[:, 4 * i] / sums[:, 4 * i + 1]
                       for i in range(len(both))])
    return ratios[:len(runs)] - ratios[len(runs):] if baseline else ratios


def _shared_draw_sums(rng: np.random.Generator, n_lines: int, n_resamples: int, columns: np.ndarray) -> np.ndarray:
    """(n_resamples, columns): per replicate, each column summed over one shared draw of line
    indices. The draws are evals/stats._resampled_sums' (the same chunks of rng.integers, so the
    same lines for a seed); the sums are counts @ columns, one matrix product instead of a gather
    per column (the bench's real path calls this at every look)."""
    chunk = max(1, _CHUNK_ENTRIES // n_lines)
    out = np.empty((n_resamples, columns.shape[1]))
    for start in range(0, n_resamples, chunk):
        stop = min(n_resamples, start + chunk)
        idx = rng.integers(0, n_lines, size=(stop - start, n_lines))
        rows = np.arange(stop - start)[:, None] * n_lines
        counts = np.bincount((idx + rows).ravel(), minlength=(stop - start) * n_lines).reshape(stop - start, n_lines)
        out[start:stop] = counts @ columns
    return out


def crossed_ci(runs: list[RunLines], baseline: list[RunLines] | None = None, n_resamples: int = DEFAULT_RESAMPLES,
               seed=DEFAULT_SEED, level: float = 0.95) -> SeedCI:
    """CI of the mean over seeds of runs[s]'s log ratio (minus baseline[s]'s: paired by seed and
    by line) when every seed is scored on the same lines. See the module doc."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1, got {level!r}")
    n_lines = _check_crossed(runs, baseline)
    if n_lines < 2:
        raise ValueError(f"a CI over lines needs at least 2 lines, got {n_lines}")
    est = np.array([r.log_ratio() for r in runs])
    if baseline:
        est = est - np.array([b.log_ratio() for b in baseline])
    if not np.all(np.isfinite(est)):
        raise ValueError(f"per-seed statistics must be finite, got {est.tolist()}")
    n_seeds, mean = int(est.size), float(est.mean())
    rng = np.random.default_rng(seed)
    by_line = line_replicates(runs, baseline, n_resamples, rng)  # (seeds, replicates)
    drawn = rng.integers(0, n_seeds, size=(n_resamples, n_seeds))
    seeds_only = est[drawn].mean(axis=1)
    lines_only = by_line.mean(axis=0)
    both = np.take_along_axis(by_line.T, drawn, axis=1).mean(axis=1)
    # Mean squares of the crossed design, each from what the bootstrap's parts vary by:
    # seeds (exact), lines (the seed mean on shared line draws), and what is left (seed x line).
    seed_ms = float(est.var(ddof=1)) / n_seeds if n_seeds > 1 else 0.0
    line_ms = float(lines_only.var(ddof=1)) * n_lines / (n_lines - 1)
    inter_ms = (float((both - seeds_only - lines_only).var(ddof=1)) * n_seeds * n_lines / ((n_seeds - 1) * (n_lines - 1))
                if n_seeds > 1 else 0.0)
    # Var(mean) = sigma_a^2/S + sigma_b^2/L + sigma_e^2/(S L): (sigma_a^2 + sigma_e^2/L)/S is the seed
    # mean square itself (the per-seed statistics' variance / S, unbiased, S - 1 df), the line part its
    # mean square less the interaction's, at least 0. Flooring the seed part at 0 instead put the
    # interaction's mean square, and its (S - 1)(L - 1) df, where the seeds' own was (issue 45).
    seed_part, line_part = seed_ms - inter_ms, max(0.0, line_ms - inter_ms)
    parts = CrossedParts(seed=seed_part * n_seeds, interaction=inter_ms * n_seeds, lines=line_part, n_lines=n_lines)
    variance, df = parts.variance(n_seeds), parts.df(n_seeds)
    se = math.sqrt(variance)
    line_means = line_changes(runs, baseline).mean(axis=0)
    line_k3 = k_statistic_3(line_means)
    third = line_k3 / n_lines ** 2
    gamma = skewness(third, variance)
    q = float(stdtrit(df, 0.5 + level / 2.0))
    within = float(np.mean(by_line.var(axis=1, ddof=1)))
    between = float(est.var(ddof=1)) if n_seeds > 1 else 0.0
    spread = float(np.std(line_means, ddof=1))
    return SeedCI(
        mean=mean, lo=mean - lower_factor(q, gamma) * se, hi=mean + upper_factor(q, gamma) * se, se=se,
        seed_sd=math.sqrt(between), seed_effect_sd=math.sqrt(max(0.0, seed_part) * n_seeds), within_se=math.sqrt(within),
        shared_line_se=math.sqrt(line_part), interaction_se=math.sqrt(inter_ms), df=df, n_seeds=n_seeds,
        mde=crossed_mde(parts, n_seeds) if n_seeds > 1 else math.inf, parts=parts if n_seeds > 1 else None,
        p_value=crossed_p(mean, se, df, gamma), line_third=third,
        line_skew=line_k3 / spread ** 3 if spread > 0 else 0.0,
    )


def line_changes(runs: list[RunLines], baseline: list[RunLines] | None = None) -> np.ndarray:
    """(seeds, lines): each run's statistic spread over its lines, linearized: line i of run s holds
    t_s + (its influence on t_s), so a row's mean is the run's log ratio exactly and, for one token a
    line, row s is the per-line change itself. A ratio R = sum nll / sum tok has influence
    (nll_i - R tok_i) / mean(tok) (the delta method); the paired log ratio is the end's R less the
    start's, and a comparison the configuration's less the baseline's."""
    def linear(nll: np.ndarray, tok: np.ndarray) -> np.ndarray:
        ratio = nll.sum() / tok.sum()
        return ratio + (nll - ratio * tok) / tok.mean()

    def of(run: RunLines) -> np.ndarray:
        return linear(run.nll_end, run.tok_end) - linear(run.nll_base, run.tok_base)

    _check_crossed(runs, baseline)
    changes = np.array([of(r) for r in runs])
    return changes - np.array([of(b) for b in baseline]) if baseline else changes


def crossed_p(mean: float, se: float, df: float, gamma: float = 0.0) -> float:
    """Two-sided p of "the true mean is 0" on the crossed CI's own scale: twice the smaller one-sided p
    of its skew-corrected bounds (evals/seeds/skew.py), so p < 1 - level exactly when the CI at `level`
    excludes 0; with no skew, 2 * stdtr(df, -|mean| / se). With se 0 (every part measured 0), 1 for a
    mean of exactly 0 and 0 otherwise."""
    if se == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    t = mean / se
    g = hall(t, gamma)
    # the lower bound clears 0 when min(t, g) > q; the upper one when max(t, g) < -q
    return min(1.0, 2.0 * min(float(stdtr(df, -min(t, g))), float(stdtr(df, max(t, g)))))


# --- between configurations, paired by seed --------------------------------------------------------

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


def leave_one_out_t(values) -> list[float]:
    """Each seed against the others: (x_i - mean of the rest) / (SD of the rest * sqrt(1 + 1/(n-1))).

    For normal seeds it follows Student's t with n - 2 df exactly, whatever n >= 3, and one far
    seed cannot hide itself by inflating the spread it is measured against (it is left out of it).
    The rest all equal: 0 for a seed equal to them too, +-inf otherwise."""
    x = np.asarray(values, dtype=np.float64)
    n = int(x.size)
    if n < 3:
        raise ValueError(f"a seed can be set against the others from 3 seeds on, got {n}")
    out = []
    for i in range(n):
        rest = np.delete(x, i)
        gap, sd = float(x[i] - rest.mean()), float(rest.std(ddof=1))
        out.append(gap / (sd * math.sqrt(1.0 + 1.0 / (n - 1))) if sd > 0 else (0.0 if gap == 0 else math.copysign(math.inf, gap)))
    return out


def outlier_cut(n_seeds: int, family_alpha: float = OUTLIER_ALPHA) -> float:
    """|t| above which a seed is flagged: Bonferroni over the n seeds, so n normal seeds get any
    flag with probability at most family_alpha (measured in tests/evals/test_seeds.py)."""
    return float(stdtrit(n_seeds - 2, 1.0 - family_alpha / (2.0 * n_seeds)))


def outliers(values, family_alpha: float = OUTLIER_ALPHA) -> list[int]:
    """Indices of the seeds far from the others (leave_one_out_t beyond outlier_cut); none below
    OUTLIER_MIN_SEEDS: at 3 seeds the other two give an SD with 1 df, its t a Cauchy whose cut (t > 48)
    a near tie of the other two crosses at any gap (-32.69% and -32.70% flagged -30.8% at t=+157)."""
    if len(values) < OUTLIER_MIN_SEEDS:
        return []
    cut = outlier_cut(len(values), family_alpha)
    return [i for i, t in enumerate(leave_one_out_t(values)) if abs(t) > cut]

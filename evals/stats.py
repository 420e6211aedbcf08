"""Uncertainty for corpus perplexity, computed from per-line sums.

Corpus perplexity is a ratio estimator, exp(sum NLL / sum tokens) over lines, so its
uncertainty comes from resampling whole lines (with replacement) and recomputing the ratio:
lines, not tokens, are the independent units (tokens of one line share its difficulty).

Paired comparison: when the same lines are scored twice (two checkpoints, or one run at two
steps), each bootstrap replicate resamples the SAME line indices for both scorings. The
per-line difficulty, which dominates the spread of one perplexity, then cancels in the ratio.

p-value (two-sided): the percentile-bootstrap p-value,
    p = min(1, 2 * min(#(log r* <= 0) + 1, #(log r* >= 0) + 1) / (B + 1)),
where r* are the bootstrap ratios. It is the smallest alpha at which the percentile CI at
level 1 - alpha would exclude 1, so the p-value and the CI never disagree. When the log ratio
is close to normal (it is a smooth function of two means over >= tens of lines) it is
uniform under the null; tests/evals/test_stats.py checks that over 200 simulated null runs.
The +1 terms keep it from reporting p = 0 with a finite number of resamples.

Minimum detectable effect: the relative perplexity change a two-sided test at alpha 0.05
detects with 80% power, given the standard error of the log ratio:
    mde = exp((z_0.975 + z_0.8) * se_log_ratio) - 1     (about 2.8 standard errors).

All resampling uses numpy.random.default_rng(seed) with a fixed default seed, so the same
inputs always give the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
# Index matrices are drawn in chunks of at most this many entries, so memory stays bounded
# (32 MiB of int64) however many lines or resamples are asked for.
_CHUNK_ENTRIES = 1 << 22

_Z_975 = NormalDist().inv_cdf(0.975)
_Z_80 = NormalDist().inv_cdf(0.80)


def _line_sums(nll_sum: object, n_tokens: object, nll_name: str, tok_name: str
               ) -> tuple[np.ndarray, np.ndarray]:
    nll = np.asarray(nll_sum, dtype=np.float64)
    tok = np.asarray(n_tokens, dtype=np.float64)
    if nll.ndim != 1 or tok.ndim != 1:
        raise ValueError(f"{nll_name} and {tok_name} must be 1-D per-line arrays, "
                         f"got shapes {nll.shape} and {tok.shape}")
    if nll.shape != tok.shape:
        raise ValueError(f"{nll_name} has {nll.size} lines but {tok_name} has {tok.size}")
    if nll.size == 0:
        raise ValueError(f"{nll_name} is empty: no lines were scored")
    bad = np.flatnonzero(~np.isfinite(nll))
    if bad.size:
        raise ValueError(f"{nll_name}[{bad[0]}] = {nll[bad[0]]}: per-line NLL sums must be finite")
    bad = np.flatnonzero(~(tok >= 1) | (tok != np.round(tok)))
    if bad.size:
        raise ValueError(f"{tok_name}[{bad[0]}] = {tok[bad[0]]}: every line needs a whole number "
                         f"of scored tokens, at least 1")
    return nll, tok


def _check_options(n_resamples: int, level: float) -> None:
    if not isinstance(n_resamples, int) or n_resamples < 100:
        raise ValueError(f"n_resamples must be an integer >= 100, got {n_resamples!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1 (e.g. 0.95), got {level!r}")


def corpus_ppl(nll_sum: np.ndarray, n_tokens: np.ndarray) -> float:
    """exp(sum of per-line NLL / sum of per-line token counts): token-weighted over all lines."""
    nll, tok = _line_sums(nll_sum, n_tokens, "nll_sum", "n_tokens")
    return math.exp(nll.sum() / tok.sum())


def _resampled_sums(rng: np.random.Generator, n_lines: int, n_resamples: int,
                    columns: list[np.ndarray]) -> list[np.ndarray]:
    """Per replicate, the sums of each column over one shared draw of line indices."""
    chunk = max(1, _CHUNK_ENTRIES // n_lines)
    sums = [np.empty(n_resamples) for _ in columns]
    for start in range(0, n_resamples, chunk):
        stop = min(n_resamples, start + chunk)
        idx = rng.integers(0, n_lines, size=(stop - start, n_lines))
        for out, col in zip(sums, columns):
            out[start:stop] = col[idx].sum(axis=1)
    return sums


def _percentile_interval(replicates: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(replicates, [tail, 1.0 - tail])
    return float(lo), float(hi)


def _two_sided_p(log_ratios: np.ndarray) -> float:
    below = int(np.count_nonzero(log_ratios <= 0.0))
    above = int(np.count_nonzero(log_ratios >= 0.0))
    return min(1.0, 2.0 * (min(below, above) + 1) / (log_ratios.size + 1))


def minimum_detectable_effect(se_log_ratio: float) -> float:
    """Relative ppl change detectable at 80% power, two-sided alpha 0.05 (see module doc)."""
    return math.expm1((_Z_975 + _Z_80) * se_log_ratio)


@dataclass(frozen=True)
class CorpusCI:
    """Corpus perplexity with its percentile bootstrap CI.

    `se` is the standard deviation (ddof=1) of the bootstrap perplexities: the bootstrap
    estimate of the standard error of `ppl` itself (not of log ppl).
    """

    ppl: float
    lo: float
    hi: float
    se: float
    n_lines: int
    n_tokens: int


def bootstrap_ppl(nll_sum: np.ndarray, n_tokens: np.ndarray,
                  n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                  level: float = 0.95) -> CorpusCI:
    nll, tok = _line_sums(nll_sum, n_tokens, "nll_sum", "n_tokens")
    _check_options(n_resamples, level)
    rng = np.random.default_rng(seed)
    nll_star, tok_star = _resampled_sums(rng, nll.size, n_resamples, [nll, tok])
    ppl_star = np.exp(nll_star / tok_star)
    lo, hi = _percentile_interval(ppl_star, level)
    return CorpusCI(ppl=math.exp(nll.sum() / tok.sum()), lo=lo, hi=hi,
                    se=float(ppl_star.std(ddof=1)), n_lines=int(nll.size),
                    n_tokens=int(tok.sum()))


@dataclass(frozen=True)
class PairedCI:
    """ppl_b / ppl_a with its bootstrap CI, two-sided p-value and minimum detectable effect.

    `mde` is a relative change (0.02 = 2%); `se_log_ratio` is the standard deviation of the
    bootstrap log ratios. `n_lines` is the number of lines of a (equal to b when paired).
    """

    ratio: float
    lo: float
    hi: float
    p_value: float
    mde: float
    se_log_ratio: float
    n_lines: int


def _ratio_ci(log_ratio: float, log_ratio_star: np.ndarray, level: float,
              n_lines: int) -> PairedCI:
    lo, hi = _percentile_interval(log_ratio_star, level)
    se = float(log_ratio_star.std(ddof=1))
    return PairedCI(ratio=math.exp(log_ratio), lo=math.exp(lo), hi=math.exp(hi),
                    p_value=_two_sided_p(log_ratio_star), mde=minimum_detectable_effect(se),
                    se_log_ratio=se, n_lines=n_lines)


def paired_ratio(nll_a: np.ndarray, tok_a: np.ndarray, nll_b: np.ndarray, tok_b: np.ndarray,
                 n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                 level: float = 0.95) -> PairedCI:
    """ppl_b / ppl_a for the SAME lines scored twice: line i of a and of b is one line."""
    nll_a, tok_a = _line_sums(nll_a, tok_a, "nll_a", "tok_a")
    nll_b, tok_b = _line_sums(nll_b, tok_b, "nll_b", "tok_b")
    if nll_a.size != nll_b.size:
        raise ValueError(f"paired scorings must cover the same lines: nll_a has {nll_a.size} "
                         f"lines, nll_b has {nll_b.size}")
    _check_options(n_resamples, level)
    rng = np.random.default_rng(seed)
    na, ta, nb, tb = _resampled_sums(rng, nll_a.size, n_resamples, [nll_a, tok_a, nll_b, tok_b])
    log_ratio = nll_b.sum() / tok_b.sum() - nll_a.sum() / tok_a.sum()
    return _ratio_ci(log_ratio, nb / tb - na / ta, level, int(nll_a.size))

"""Group-sequential boundaries by alpha spending (Lan & DeMets 1983): how far a standardized
statistic must be at each look so that, over every look, a true null crosses at most alpha.

A spending function alpha(t) says how much of the error rate may be used by information fraction
t (0 < t <= 1; t = 1 at the last look): "obf" is the O'Brien-Fleming shape, 2 - 2 Phi(z_{1-a/2} / sqrt t),
which spends almost nothing early (Lan & DeMets 1983); "pocock" is a log(1 + (e - 1) t), which
spends about evenly (Kim & DeMets 1987). Boundary k is the z whose first crossing at look k, having
continued at every earlier look, has probability alpha(t_k) - alpha(t_{k-1}) under the null.

That probability is computed by recursive numerical integration (Armitage, McPherson & Rowe 1969;
Jennison & Turnbull 2000, ch. 19): the sub-density of Z_k on the region where the test continued,
on a Simpson grid, carried look to look by the Brownian-motion increment of the score
(Var = t_k - t_{k-1}), so the correlations corr(Z_j, Z_k) = sqrt(t_j / t_k) are exact. It is
deterministic (no Monte-Carlo), so a boundary recomputed from the files is the logged one to the
last digit. Tested against the published constants (Pocock 5 looks 2.413, O'Brien-Fleming 5 looks
2.040, two-sided 0.05), scipy's multivariate normal and a plain Monte-Carlo of the crossings:
tests/evals/test_spending.py.

numpy and math only (scipy is a test dependency of tatu, not a run-time one).
"""
from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np

SHAPES = ("obf", "pocock")
_Z = NormalDist()
GRID_HALF = 200        # Simpson grid of 2 * GRID_HALF + 1 points per look: errors ~1e-8 on the crossing probability
FAR = 8.0              # |z| past which the null density is negligible (P(Z > 8) = 6e-16): the open side of a one-sided region
NO_INFORMATION = 1e-9  # an information fraction that did not grow: no new data, so no new alpha


def spent(shape: str, fraction: float, alpha: float) -> float:
    """alpha(t): the error rate the design may have used by information fraction t (alpha at t >= 1)."""
    if shape not in SHAPES:
        raise ValueError(f"unknown spending shape {shape!r} (known: {', '.join(SHAPES)})")
    if fraction <= 0.0:
        return 0.0
    t = min(1.0, fraction)
    if shape == "obf":
        return 2.0 * (1.0 - _Z.cdf(_Z.inv_cdf(1.0 - alpha / 2.0) / math.sqrt(t)))
    return alpha * math.log(1.0 + (math.e - 1.0) * t)


def _tail(x: np.ndarray) -> np.ndarray:
    """P(N(0, 1) > x), elementwise, accurate far into the tail (erfc, not 1 - cdf)."""
    return np.fromiter((0.5 * math.erfc(v / math.sqrt(2.0)) for v in x.ravel()), float, x.size).reshape(x.shape)


def _simpson(lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    z = np.linspace(lo, hi, 2 * GRID_HALF + 1)
    w = np.ones_like(z)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return z, w * (z[1] - z[0]) / 3.0


class _Recursion:
    """The null sub-density of Z_k where the test has continued so far, look by look."""

    def __init__(self):
        self.z = self.weighted = None  # grid of the last look's continuation region; density x Simpson weight
        self.fraction = 0.0

    def upper_crossing(self, bound: float, fraction: float) -> float:
        """P(continued at every earlier look, and Z_k > bound at this one)."""
        if self.z is None:
            return 0.5 * math.erfc(bound / math.sqrt(2.0))
        step = math.sqrt(fraction - self.fraction)
        shifted = (bound * math.sqrt(fraction) - self.z * math.sqrt(self.fraction)) / step
        return float(self.weighted @ _tail(shifted))

    def advance(self, lower: float, upper: float, fraction: float) -> None:
        """Continue to the next look with the region (lower, upper) at this one."""
        z, w = _simpson(lower, upper)
        if self.z is None:
            density = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
        else:
            step = math.sqrt(fraction - self.fraction)
            # Z_k sqrt(t_k) = Z_{k-1} sqrt(t_{k-1}) + N(0, t_k - t_{k-1}): the score's independent increment
            gap = (z[:, None] * math.sqrt(fraction) - self.z[None, :] * math.sqrt(self.fraction)) / step
            density = (np.exp(-0.5 * gap * gap) / math.sqrt(2.0 * math.pi) * math.sqrt(fraction) / step) @ self.weighted
        self.z, self.weighted, self.fraction = z, density * w, fraction


def _check_fractions(fractions) -> tuple[float, ...]:
    out = tuple(float(t) for t in fractions)
    if not out or any(not 0.0 < t <= 1.0 for t in out) or any(b < a for a, b in zip(out, out[1:])):
        raise ValueError(f"information fractions must be non-decreasing in (0, 1], got {list(out)}")
    return out


def crossing_probabilities(bounds, fractions, two_sided: bool = False) -> list[float]:
    """Under the null, P(the first crossing of the upper bound is at look k), per look; with two_sided,
    the test also stops below -bound (and this is one side's probability: the other is the same).
    A bound of inf never crosses; a look whose fraction did not grow adds nothing."""
    fractions = _check_fractions(fractions)
    if len(bounds) != len(fractions):
        raise ValueError(f"{len(bounds)} bounds for {len(fractions)} looks")
    recursion, out = _Recursion(), []
    for bound, fraction in zip(bounds, fractions):
        if recursion.z is not None and fraction - recursion.fraction < NO_INFORMATION:
            out.append(0.0)
            continue
        upper = min(float(bound), FAR)
        out.append(recursion.upper_crossing(upper, fraction) if math.isfinite(bound) else 0.0)
        recursion.advance(-upper if two_sided else -FAR, upper, fraction)
    return out


def _solve(recursion: _Recursion, target: float, fraction: float) -> float:
    """The bound whose upper crossing at this look has probability `target` (bisection: it falls with the bound)."""
    lo, hi = 0.0, FAR
    if recursion.upper_crossing(lo, fraction) <= target:
        return lo
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if recursion.upper_crossing(mid, fraction) > target:
            lo = mid
        else:
            hi = mid
    return hi


@lru_cache(maxsize=4096)
def _bounds(shape: str, fractions: tuple[float, ...], alpha: float, two_sided: bool) -> tuple[float, ...]:
    recursion, bounds, used = _Recursion(), [], 0.0
    for fraction in fractions:
        grew = recursion.z is None or fraction - recursion.fraction >= NO_INFORMATION
        budget = spent(shape, fraction, alpha) - used if grew else 0.0
        # two-sided: the region is symmetric, so each side takes half of this look's alpha
        target = budget / 2.0 if two_sided else budget
        if target <= 1e-15:
            bounds.append(math.inf)
            if grew:
                recursion.advance(-FAR, FAR, fraction)
            continue
        bound = _solve(recursion, target, fraction)
        bounds.append(bound)
        used += budget
        recursion.advance(-bound if two_sided else -FAR, bound, fraction)
    return tuple(bounds)


def spending_bounds(shape: str, fractions, alpha: float, two_sided: bool = False) -> tuple[float, ...]:
    """The z boundary at each look (inf where nothing is left to spend). One-sided: the upper
    crossings spend alpha; two-sided: |Z| crossings spend alpha, half on each side."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if shape not in SHAPES:
        raise ValueError(f"unknown spending shape {shape!r} (known: {', '.join(SHAPES)})")
    return _bounds(shape, _check_fractions(fractions), float(alpha), bool(two_sided))


def classical_constant(shape: str, looks: int, alpha: float, two_sided: bool = True) -> float:
    """Pocock's (1977) constant boundary C, or O'Brien & Fleming's (1979) C of C sqrt(K / k), for K
    equally spaced looks: the C whose crossings over all looks total alpha. The published tables'
    numbers (Jennison & Turnbull 2000, tables 2.1 and 2.3), which spending functions approximate."""
    fractions = [k / looks for k in range(1, looks + 1)]
    scale = [1.0] * looks if shape == "pocock" else [math.sqrt(looks / k) for k in range(1, looks + 1)]
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r} (known: {', '.join(SHAPES)})")

    def total(c: float) -> float:
        sides = 2.0 if two_sided else 1.0
        return sides * sum(crossing_probabilities([c * s for s in scale], fractions, two_sided))

    lo, hi = 1.0, 6.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if total(mid) > alpha else (lo, mid)
    return hi

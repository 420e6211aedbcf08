"""Downstream accuracy: exact match after normalisation (tatu.data.answers' one rule), with a
Wilson confidence interval.

The Wilson score interval (without continuity correction) stays inside [0, 1] and is
informative at 0/n and n/n, where the normal-approximation interval collapses to a point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from tatu.data.answers import normalize_answer


@dataclass(frozen=True)
class Accuracy:
    accuracy: float
    lo: float
    hi: float
    n: int
    n_correct: int


def wilson_interval(n_correct: int, n: int, level: float = 0.95) -> tuple[float, float]:
    if n < 1:
        raise ValueError(f"n must be >= 1 for a Wilson interval, got {n}")
    if not 0 <= n_correct <= n:
        raise ValueError(f"n_correct must be between 0 and n={n}, got {n_correct}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1 (e.g. 0.95), got {level!r}")
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    p = n_correct / n
    z2n = z * z / n
    centre = (p + z2n / 2.0) / (1.0 + z2n)
    half = z / (1.0 + z2n) * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n))
    # At 0/n and n/n the bound is exactly 0 or 1; rounding would leave 1e-17 off it.
    lo = 0.0 if n_correct == 0 else max(0.0, centre - half)
    hi = 1.0 if n_correct == n else min(1.0, centre + half)
    return lo, hi


def exact_match(predictions: Sequence[str], references: Sequence[str],
                level: float = 0.95) -> Accuracy:
    """Share of predictions equal to their reference after normalize_answer, with its CI."""
    if isinstance(predictions, str) or isinstance(references, str):
        raise TypeError("predictions and references must be sequences of strings, not a str")
    if len(predictions) != len(references):
        raise ValueError(f"predictions has {len(predictions)} items but references has "
                         f"{len(references)}")
    if not predictions:
        raise ValueError("predictions is empty: the accuracy of no answers is undefined")
    n_correct = 0
    for i, (pred, ref) in enumerate(zip(predictions, references)):
        for name, value in (("predictions", pred), ("references", ref)):
            if not isinstance(value, str):
                raise TypeError(f"{name}[{i}] must be a str, got {type(value).__name__}")
        n_correct += normalize_answer(pred) == normalize_answer(ref)
    n = len(predictions)
    lo, hi = wilson_interval(n_correct, n, level)
    return Accuracy(accuracy=n_correct / n, lo=lo, hi=hi, n=n, n_correct=n_correct)

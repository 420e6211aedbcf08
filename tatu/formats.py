"""How tatu writes a relative change, everywhere it shows one (EVAL line, status, report, demo)."""
from __future__ import annotations

import math


def fmt_pct(fraction) -> str:
    """A relative change given as a fraction: signed, one decimal (0.012 -> "+1.2%"); "n/a" when unknown."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not math.isfinite(fraction):
        return "n/a"
    return f"{fraction * 100:+.1f}%"


def _round_up_one_digit(x: float) -> str:
    exponent = math.floor(math.log10(x))
    mantissa = math.ceil(x / 10 ** exponent - 1e-9)
    if mantissa == 10:
        mantissa, exponent = 1, exponent + 1
    return f"{mantissa * 10 ** exponent:.{max(0, -exponent)}f}"


def fmt_p(p, n_resamples: int = 2000) -> str:
    """A bootstrap p-value (tatu.evals.stats): three decimals. At its floor, 2 / (B + 1) for B
    resamples (no replicate crossed 0), the true p is only known to be at most that: "<0.001"
    for B = 2000, never "0.001". "n/a" when unknown."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p):
        return "n/a"
    floor = min(1.0, 2.0 / (n_resamples + 1))
    if p <= floor * (1 + 1e-9):
        return f"<{_round_up_one_digit(floor)}"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1g}"

"""How tatu writes a relative change, everywhere it shows one (EVAL line, status, report, demo)."""
from __future__ import annotations

import math


def fmt_pct(fraction) -> str:
    """A relative change given as a fraction: signed, one decimal (0.012 -> "+1.2%"); "n/a" when unknown."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not math.isfinite(fraction):
        return "n/a"
    return f"{fraction * 100:+.1f}%"

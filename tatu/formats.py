"""How tatu names its eval sets and writes their numbers, everywhere it shows them (EVAL line,
status, report, demo)."""
from __future__ import annotations

import math


def fmt_pct(fraction) -> str:
    """A relative change given as a fraction: signed, one decimal (0.012 -> "+1.2%"); "n/a" when unknown."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not math.isfinite(fraction):
        return "n/a"
    return f"{fraction * 100:+.1f}%"


# The eval sets a run reports, in the order every line and table shows them.
SET_NAMES = ("sftHeld", "ptVal", "enRuler")
PPL_DIGITS = {"sftHeld": 4, "ptVal": 2, "enRuler": 2}  # as in the EVAL contract line


def fmt_ppl(ppl, set_name: str) -> str:
    """A perplexity with its set's digits; "n/a" when unknown."""
    if isinstance(ppl, bool) or not isinstance(ppl, (int, float)):
        return "n/a"
    return f"{ppl:.{PPL_DIGITS.get(set_name, 2)}f}" if math.isfinite(ppl) else str(float(ppl))

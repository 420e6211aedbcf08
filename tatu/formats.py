"""How tatu names its eval sets and writes their numbers, everywhere it shows them (EVAL line,
status, report, demo)."""
from __future__ import annotations

import math


def fmt_pct(fraction) -> str:
    """A relative change given as a fraction: signed, one decimal (0.012 -> "+1.2%"); "n/a" when unknown."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not math.isfinite(fraction):
        return "n/a"
    return f"{fraction * 100:+.1f}%"


def fmt_interval(lo, hi, fmt_end=fmt_pct) -> str:
    """A CI's two ends, the one way tatu writes an interval: "[+7.1%,+9.3%]" (brackets, a comma, no
    space). Each end is written by `fmt_end`: fmt_pct for a relative change; a perplexity, a ratio
    or a rate passes its own digits (`"{:.4g}".format`)."""
    return f"[{fmt_end(lo)},{fmt_end(hi)}]"


def fmt_ci(value, lo, hi) -> str:
    """A relative change with its CI, as every line and table writes it: "+8.1% [+7.1%,+9.3%]"."""
    return f"{fmt_pct(value)} {fmt_interval(lo, hi)}"


def fmt_share(fraction) -> str:
    """A spread or a share given as a fraction, unsigned, one decimal (0.012 -> "1.2%"); "n/a" when unknown."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not math.isfinite(fraction):
        return "n/a"
    return f"{fraction * 100:.1f}%"


# The three roles (best by sftHeld, drift on enRuler, ptVal shown), in the order every line and
# table shows them; any other eval set of the manifest (a held-out domain) follows them.
SET_NAMES = ("sftHeld", "ptVal", "enRuler")
PPL_DIGITS = {"sftHeld": 4, "ptVal": 2, "enRuler": 2}  # as in the EVAL contract line
# An eval set's name becomes part of metric names (`ptFaq_change_hi` in a sweep rule,
# `ptFaq_change=` on the EVAL line, `sftHeld_exact` for its answers right), so it is a letter then
# letters or digits (no "_", which separates the metric's parts), and never a name those metrics
# already use.
EVAL_NAME_RULE = "a letter, then letters or digits"
RESERVED_NAMES = frozenset({"drift", "best", "step", "mde", "aborted", "abort", "verdict", "evals", "sets",
                            "changes", "notes", "line", "lines", "seconds", "warnings", "generations", "categories",
                            "tasks", "every", "change", "worst", "trunk", "p", "exact", "answers"})


def eval_name_problem(name: str) -> str | None:
    """Why `name` cannot name an eval set (None when it can)."""
    if not (name[:1].isascii() and name[:1].isalpha() and name.isascii() and name.isalnum()):
        return f"eval set name {name!r} is malformed: expected {EVAL_NAME_RULE}"
    if name.lower() in RESERVED_NAMES:
        return f"eval set name {name!r} collides with a metric name ({name.lower()})"
    return None


def ordered_sets(names) -> list[str]:
    """The three roles first (in SET_NAMES order), then every other set in the order given."""
    names = list(dict.fromkeys(names))
    return [n for n in SET_NAMES if n in names] + [n for n in names if n not in SET_NAMES]


def fmt_ppl(ppl, set_name: str) -> str:
    """A perplexity with its set's digits; "n/a" when unknown."""
    if isinstance(ppl, bool) or not isinstance(ppl, (int, float)):
        return "n/a"
    return f"{ppl:.{PPL_DIGITS.get(set_name, 2)}f}" if math.isfinite(ppl) else str(float(ppl))


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


def fmt_p_formula(p) -> str:
    """A p-value from a formula (a t test: no resampling floor): three decimals, "<0.001" below."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p):
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_duration(seconds: float) -> str:
    """Whole seconds as 3h05m, 4m07s or 12s (a sweep's cost and ETA)."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else (f"{rest // 60}m{rest % 60:02d}s" if rest >= 60 else f"{rest}s")

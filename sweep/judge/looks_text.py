"""A sequential schedule's looks in words: one line per look (its seeds, the crossed CI at the level
its boundary spends, the threshold, the decision) under a line per configuration (its decision and
the seeds it ran). The same lines in the coordinator's log, `tatu sweep status` and the report's
verdict (tatu.sweep.judge.verdict)."""
from __future__ import annotations

import math

from tatu.evals.seeds.sequential import Look
from tatu.formats import fmt_ci
from tatu.sweep.judge.looks_log import LoggedLook
from tatu.sweep.judge.schedule import Schedule


def pct(log_value: float) -> str:
    """A log-scale value as the relative change it is: `+3.6%` (`none` for an infinite one)."""
    return f"{math.expm1(log_value) * 100:+.1f}%" if math.isfinite(log_value) else "none"


def configurations(n: int) -> str:
    return f"{n} configuration{'s' * (n != 1)}"


def pooled_clause(entry: LoggedLook) -> str:
    """`, seed variance pooled over 3 configurations (5 df)` for a look that pooled it; '' otherwise."""
    if entry.pooled is None:
        return ""
    df = entry.look.n_seeds - 1 + sum(len(g.members) - 1 for g in entry.pooled)
    return f", seed variance pooled over {configurations(entry.pooled_configs)} ({df} df)"


def upper_bound(look: Look) -> float:
    """The upper end of the look's CI at the level its boundary spends (log scale; inf: nothing spent)."""
    return look.mean + look.t_bound * look.se if math.isfinite(look.t_bound) else math.inf


def look_line(entry: LoggedLook) -> str:
    """`look d drift_hi < 5% at 4 seeds: continue (CI at the spent level +3.6% [+0.1%,+7.2%] vs +5.0%;
    t 1.72, boundary 4.34)`: the mean and the crossed CI whose level the boundary spends, as every CI
    is written (tatu.formats.fmt_ci: n/a ends while nothing is spent), and its threshold."""
    look = entry.look
    bound = look.t_bound
    lo, hi = ((look.mean - bound * look.se, look.mean + bound * look.se) if math.isfinite(bound)
              else (math.nan, math.nan))
    ci = fmt_ci(math.expm1(look.mean), math.expm1(lo), math.expm1(hi))
    return (f"look {entry.config} {entry.criterion} at {look.n_seeds} seeds: {look.decision} (CI at the spent level "
            f"{ci} vs {pct(look.threshold)}; t {look.statistic:.2f}, "
            f"boundary {bound:.2f}{pooled_clause(entry)}{', final look' if look.final else ''})")


def looks_lines(plan: Schedule, states: dict[str, str]) -> list[str]:
    """The design's order, then per configuration its decision, the seeds it ran and its looks."""
    lines = [f"sequential design: {plan.order}"]
    for config in plan.configs:
        ran = sum(states.get(m.run) in ("done", "aborted", "diverged", "running") for m in config.members)
        decision = config.decision if config.looks or config.active or ran else "not run"
        lines.append(f"  {config.config}: {decision}, {ran} of {len(config.members)} seeds run"
                     + (", under test" if config.active else "")
                     + (f" (its looks passed; {'; '.join(f.text() for f in config.end_failed)})" if config.end_failed else ""))
        lines += [f"    {look_line(entry)}" for entry in config.looks]
    return lines

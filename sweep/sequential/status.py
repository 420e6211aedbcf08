"""What the operator reads about a sequential sweep (`tatu sweep status`, the coordinator's log): per
configuration its looks (seeds, the crossed CI at the spent level, the boundary, the decision), the
runs spent against the fixed design's max_seeds x configurations, and the verdict in one sentence
with its error guarantee. Text from a Schedule (sweep/sequential/schedule.py); nothing computed here."""
from __future__ import annotations

import math

from tatu.sweep.sequential.log import LoggedLook
from tatu.sweep.sequential.schedule import Schedule

# The false pass at the threshold measured with tatu's own looks (bench/sequential.py --reps 20000,
# docs/sweeps.md): above the design's alpha / 2 at 3-5 seeds, so the sentence says both.
MEASURED_FALSE_PASS = {"obf": 0.037, "pocock": 0.043}


def _pct(log_value: float) -> str:
    return f"{math.expm1(log_value) * 100:+.1f}%" if math.isfinite(log_value) else "none"


def look_line(entry: LoggedLook) -> str:
    """`look full-replay2 drift_hi < MIX_FORGET_LIMIT at 3 seeds: continue (mean +1.2%, upper bound at
    the spent level +3.4% vs +5.0%; t 1.10, boundary 3.71)`."""
    look = entry.look
    bound = look.t_bound
    upper = look.mean + bound * look.se if math.isfinite(bound) else math.inf
    return (f"look {entry.config} {entry.criterion} at {look.n_seeds} seeds: {look.decision} (mean {_pct(look.mean)}, "
            f"upper bound at the spent level {_pct(upper)} vs {_pct(look.threshold)}; t {look.statistic:.2f}, "
            f"boundary {bound:.2f}{', final look' if look.final else ''})")


def runs_line(plan: Schedule, states: dict[str, str]) -> str:
    spent, fixed = plan.spent(states), plan.fixed_runs
    return (f"runs: {spent} of the fixed design's {fixed} ({plan.design.max_seeds} seeds x {len(plan.configs)} "
            f"configurations, {spent / fixed:.0%})" if fixed else "runs: none planned")


def verdict_sentence(plan: Schedule, rule_text: str, axis: str) -> str:
    design = plan.design
    guarantee = (f"sequential {design.shape}, {design.min_seeds} to {design.max_seeds} seeds: a configuration at its "
                 f"threshold passes a criterion with probability {design.alpha / 2:.1%} by design "
                 f"({MEASURED_FALSE_PASS.get(design.shape, math.nan):.1%} measured at few seeds, docs/sweeps.md)")
    if not plan.decided:
        active = [f"{c.config} ({c.seeds_looked} seeds looked)" for c in plan.configs if c.active]
        return f"verdict not decided yet: {', '.join(active) or 'nothing'} under test; {guarantee}"
    if plan.chosen is None:
        return f"verdict: no {axis} satisfies the rule ({rule_text}); {guarantee}"
    return f"verdict: {axis}={plan.chosen} ({rule_text}); {guarantee}"


def status_lines(plan: Schedule, states: dict[str, str], rule_text: str, axis: str) -> list[str]:
    """The block `tatu sweep status` prints for a sequential sweep."""
    lines = [f"sequential design: {plan.order}"]
    for config in plan.configs:
        ran = sum(states.get(m.run) in ("done", "aborted", "diverged", "running") for m in config.members)
        lines.append(f"  {config.config}: {config.decision}, {ran} of {len(config.members)} seeds run"
                     + (", under test" if config.active else ""))
        lines += [f"    {look_line(entry)}" for entry in config.looks]
    return lines + [runs_line(plan, states), verdict_sentence(plan, rule_text, axis)]

"""What the operator reads about a sequential sweep (`tatu sweep status`, the coordinator's log): per
configuration its looks (seeds, the crossed CI at the spent level, the boundary, the decision), the
runs spent against the fixed design's max_seeds x configurations, and the verdict in one sentence
with its error guarantee. Text from a Schedule (sweep/sequential/schedule.py); sweep_status builds
one from the looks log alone, scoring nothing."""
from __future__ import annotations

import math
from pathlib import Path

from tatu.evals.seeds.sequential import Design, Look
from tatu.sweep.sequential import log as looks_log
from tatu.sweep.sequential.log import LoggedLook
from tatu.sweep.sequential.schedule import Schedule, locked_rule, schedule

# The false pass at the threshold measured with tatu's own looks (bench/sequential.py --reps 20000,
# docs/sweeps.md): above the design's alpha / 2 at 3-5 seeds, so the sentence says both.
MEASURED_FALSE_PASS = {"obf": 0.037, "pocock": 0.043}
# the same for min_seeds = 2, the seed variance pooled across six configurations sharing it
# (bench/sequential.py --min-seeds 2 --reps 2000: MC SE 0.0016 and 0.0018, docs/sweeps.md)
MEASURED_POOLED_FALSE_PASS = {"obf": 0.030, "pocock": 0.040}


def _pct(log_value: float) -> str:
    return f"{math.expm1(log_value) * 100:+.1f}%" if math.isfinite(log_value) else "none"


def plan_line(design: Design, n_configs: int) -> str:
    """What `tatu sweep plan` says of a sequential plan before anything runs."""
    line = (f"sequential design ({design.shape}): a look after each finished seed from {design.min_seeds} to "
            f"{design.max_seeds} seeds per configuration, alpha {design.alpha} spent over them; at most "
            f"{design.max_seeds} x {n_configs} = {design.max_seeds * n_configs} runs (the fixed design's), as few as "
            f"{design.min_seeds} when the first configuration tested decides the rule at its first look")
    if design.pools_seed_variance:
        line += (f". Each look's seed variance is pooled across up to {_configurations(n_configs)} (its own seeds and "
                 "each other configuration's first finished ones, as many at most), which assumes every "
                 "configuration has the same seed variance")
    return line


def pooled_clause(entry: LoggedLook) -> str:
    """`, seed variance pooled over 3 configurations (5 df)` for a look that pooled it; '' otherwise."""
    if entry.pooled is None:
        return ""
    df = entry.look.n_seeds - 1 + sum(len(g.members) - 1 for g in entry.pooled)
    return f", seed variance pooled over {_configurations(entry.pooled_configs)} ({df} df)"


def _configurations(n: int) -> str:
    return f"{n} configuration{'s' * (n != 1)}"


def upper_bound(look: Look) -> float:
    """The upper end of the look's CI at the level its boundary spends (log scale; inf: nothing spent)."""
    return look.mean + look.t_bound * look.se if math.isfinite(look.t_bound) else math.inf


def look_line(entry: LoggedLook) -> str:
    """`look d drift_hi < 5% at 4 seeds: continue (CI at the spent level [+0.1%, +7.2%] vs +5.0%; mean
    +3.6%, t 1.72, boundary 4.34)`: the crossed CI whose level the boundary spends, its threshold."""
    look = entry.look
    bound = look.t_bound
    lo, hi = ((look.mean - bound * look.se, look.mean + bound * look.se) if math.isfinite(bound)
              else (-math.inf, math.inf))
    return (f"look {entry.config} {entry.criterion} at {look.n_seeds} seeds: {look.decision} (CI at the spent level "
            f"[{_pct(lo)}, {_pct(hi)}] vs {_pct(look.threshold)}; mean {_pct(look.mean)}, t {look.statistic:.2f}, "
            f"boundary {bound:.2f}{pooled_clause(entry)}{', final look' if look.final else ''})")


def runs_line(plan: Schedule, states: dict[str, str]) -> str:
    spent, fixed = plan.spent(states), plan.fixed_runs
    return (f"runs: {spent} of the fixed design's {fixed} ({plan.design.max_seeds} seeds x {len(plan.configs)} "
            f"configurations, {spent / fixed:.0%})" if fixed else "runs: none planned")


def verdict_clause(plan: Schedule, rule_text: str, axis: str) -> str:
    """`config=b (RULE); sequential obf, 3 to 5 seeds: ...the guarantee...` (or `no config satisfies
    ...`, `not decided yet: ...`): the verdict and its error guarantee, for status and the report."""
    design = plan.design
    measured = (MEASURED_POOLED_FALSE_PASS if design.pools_seed_variance else MEASURED_FALSE_PASS).get(design.shape, math.nan)
    guarantee = (f"sequential {design.shape}, {design.min_seeds} to {design.max_seeds} seeds: a configuration at its "
                 f"threshold passes a criterion with probability {design.alpha / 2:.1%} by design "
                 f"({measured:.1%} measured at few seeds, docs/sweeps.md)")
    if design.pools_seed_variance:
        most = max((l.pooled_configs for c in plan.configs for l in c.looks), default=len(plan.configs))
        guarantee += (f", its looks' seed variance pooled across up to {_configurations(most)}, which assumes every "
                      "configuration has the same seed variance")
    if not plan.decided:
        active = [f"{c.config} ({c.seeds_looked} seeds looked)" for c in plan.configs if c.active]
        return f"not decided yet: {', '.join(active) or 'nothing'} under test; {guarantee}"
    if plan.chosen is None:
        return f"no {axis} satisfies the rule ({rule_text}); {guarantee}"
    return f"{axis}={plan.chosen} ({rule_text}); {guarantee}"


def verdict_sentence(plan: Schedule, rule_text: str, axis: str) -> str:
    clause = verdict_clause(plan, rule_text, axis)
    return f"verdict {clause}" if not plan.decided else f"verdict: {clause}"


def status_lines(plan: Schedule, states: dict[str, str], rule_text: str, axis: str) -> list[str]:
    """The block `tatu sweep status` prints for a sequential sweep."""
    lines = [f"sequential design: {plan.order}"]
    for config in plan.configs:
        ran = sum(states.get(m.run) in ("done", "aborted", "diverged", "running") for m in config.members)
        decision = config.decision if config.looks or config.active or ran else "not run"
        lines.append(f"  {config.config}: {decision}, {ran} of {len(config.members)} seeds run"
                     + (", under test" if config.active else "")
                     + (f" (its looks passed; {'; '.join(f.text() for f in config.end_failed)})" if config.end_failed else ""))
        lines += [f"    {look_line(entry)}" for entry in config.looks]
    return lines + [runs_line(plan, states), verdict_sentence(plan, rule_text, axis)]


def sweep_status(lock: dict, sweep_dir: Path, states: dict[str, str]) -> tuple[Schedule, list[str]]:
    """(the schedule, the block to print) from the looks log alone: status scores nothing, so a look
    the coordinator has not logged yet shows (and counts) on its next pass."""
    plan = schedule(lock, states, looks_log.read(sweep_dir), None)
    rule = locked_rule(lock)
    return plan, status_lines(plan, states, rule.text, rule.axis)

"""What the operator reads about a sequential sweep before and while it runs: `tatu sweep plan`'s
line for its design, and `tatu sweep status`'s block (its looks, the runs spent against the fixed
design's max_seeds x configurations, and the verdict with its error guarantee), built from the
looks log alone, scoring nothing."""
from __future__ import annotations

from pathlib import Path

from tatu.evals.seeds.sequential import Design
from tatu.sweep.judge import looks_log
from tatu.sweep.judge.verdict import guarantee_clause, runs_line, verdict_sentence
from tatu.sweep.judge.looks_text import configurations, looks_lines
from tatu.sweep.judge.schedule import Schedule, schedule
from tatu.sweep.plan.lock import LockedPlan


def plan_line(design: Design, n_configs: int) -> str:
    """What `tatu sweep plan` says of a sequential plan before anything runs."""
    line = (f"sequential design ({design.shape}): a look after each finished seed from {design.min_seeds} to "
            f"{design.max_seeds} seeds per configuration, alpha {design.alpha} spent over them; at most "
            f"{design.max_seeds} x {n_configs} = {design.max_seeds * n_configs} runs (the fixed design's), as few as "
            f"{design.min_seeds} when the first configuration tested decides the rule at its first look; "
            # the level the design reaches, as measured: the same clause the verdict ends with
            f"{guarantee_clause(design)}")
    if design.pools_seed_variance:
        line += (f". Each look's seed variance is pooled across up to {configurations(n_configs)} (its own seeds and "
                 "each other configuration's first finished ones, as many at most), which assumes every "
                 "configuration has the same seed variance")
    return line


def sweep_status(locked: LockedPlan, sweep_dir: Path, states: dict[str, str]) -> tuple[Schedule, list[str]]:
    """(the schedule, the block to print) from the looks log alone: status scores nothing, so a look
    the coordinator has not logged yet shows (and counts) on its next pass."""
    plan = schedule(locked, states, looks_log.read(sweep_dir), None)
    return plan, looks_lines(plan, states) + [runs_line(plan, states), verdict_sentence(locked.plan, plan)]

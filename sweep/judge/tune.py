"""A sweep's [tune] stage: the value chosen on the dev half of sftHeld (the ruler never chooses)."""
from __future__ import annotations

from pathlib import Path

from tatu.sweep.judge.analysis import stage_table
from tatu.sweep.plan.lock import LockedPlan, Tuned, TuneScore
from tatu.sweep.plan.member import Member


def select_tuned(sweep_dir: Path, locked: LockedPlan, members: list[Member]) -> Tuned:
    """The tune value with the lowest mean sftHeld change on the dev half, over the tune seeds.

    Values with an aborted or diverged seed are passed over while another value has none."""
    var = locked.plan.tune_var
    configs = stage_table(locked, members, sweep_dir, "tune")
    candidates = []
    for config in configs:
        stats = config.stats["sftHeld"]
        clean = all(r.state == "done" for r in config.results)
        if stats is not None:
            candidates.append((not clean, stats.log_mean, config.values[var], stats))
    if not candidates:
        raise RuntimeError("tune stage: no tune member has a result to choose from")
    candidates.sort(key=lambda c: (c[0], c[1]))
    _, _, value, stats = candidates[0]
    scores = {c[2]: TuneScore(c[3].change.value, c[3].change.lo, c[3].change.hi, not c[0]) for c in candidates}
    reason = f"mean dev-half sftHeld change {stats.change.value * 100:+.2f}% over {stats.n_seeds} seeds"
    return Tuned(var, value, "sftHeld dev half (even line indices)", reason, scores)

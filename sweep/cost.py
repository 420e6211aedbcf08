"""What a sweep will cost, from what earlier runs of this machine measured (`tatu sweep plan`)."""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from tatu.daemon.run.paths import RunDir
from tatu.sweep.plan.load import Member


@dataclass(frozen=True)
class StepCost:
    seconds_per_slot: float  # seconds per micro-batch x micro_batch x seq_len of a training step
    eval_seconds: float
    source: str


def measured_cost(runs: list[Path]) -> StepCost | None:
    """Step and eval times measured by earlier runs of this machine (their events and the
    config in their checkpoints' meta.json)."""
    slots, evals, used = [], [], []
    for run_dir in runs:
        files = RunDir(run_dir)
        config = None
        for ckpt in (files.final, files.state, files.best):
            meta = ckpt / "meta.json"
            if meta.is_file():
                config = json.loads(meta.read_text()).get("config")
                break
        if not files.events_file.is_file() or not config:
            continue
        steps = [e["seconds"] for e in files.events("step") if e.get("seconds")]
        if not steps:
            continue
        n_micro = int(config.get("SFT_GE", 0)) + (int(config.get("REPLAY_N", 0)) if config.get("TATU_MODE") == "sft" else 0)
        slot = max(1, n_micro) * int(config.get("TATU_MICRO_BATCH", 8)) * int(config.get("TATU_SEQ_LEN", 128))
        slots.append(statistics.median(steps) / slot)
        evals += [e["seconds"] for e in files.events("eval") if e.get("step", 0) > 0]
        used.append(run_dir.name)
    if not slots:
        return None
    return StepCost(statistics.median(slots), statistics.median(evals) if evals else 0.0, ", ".join(used[:3]))


def member_seconds(member: Member, cost: StepCost) -> float:
    env = member.env
    steps = int(env.get("MIX_STEPS_LIMIT", 200))
    n_micro = int(env.get("SFT_GE", 8)) + int(env.get("REPLAY_N", 0))
    slot = n_micro * int(env.get("TATU_MICRO_BATCH", 8)) * int(env.get("TATU_SEQ_LEN", 128))
    evals = steps // int(env.get("EVAL_EVERY", 8)) + 2  # the baseline and the last step
    return steps * slot * cost.seconds_per_slot + evals * cost.eval_seconds


def estimate(plan, out: Path, shown: list[Member]) -> tuple[StepCost | None, float | None]:
    """(the measured StepCost or None, the seconds of runs `shown` takes in all, or None): from
    the runs already in the sweep's run dir and the run that made the seed checkpoint."""
    runs = [Path(plan.base_env["TATU_SEED_CKPT"]).parent] if plan.base_env.get("TATU_SEED_CKPT") else []
    if out.is_dir():
        runs = sorted(p for p in out.iterdir() if p.is_dir()) + runs
    cost = measured_cost(runs)
    return cost, (sum(member_seconds(m, cost) for m in shown) if cost else None)


def unfinished_estimate(plan, sweep_dir: Path, k: int) -> float | None:
    """Wall seconds the members without a verdict take at K at a time, as `tatu sweep plan` estimates."""
    out = sweep_dir.absolute() / "runs"
    shown = plan.tune_members(out) + plan.compare_members(out, {plan.tune_var: plan.tune_values[0]} if plan.tune_var else None)
    _, total = estimate(plan, out, [m for m in shown if not RunDir(out / m.run).verdict_file.exists()])
    return None if total is None else total / k

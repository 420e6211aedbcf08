"""What a sweep will cost, from what earlier runs of this machine measured (`tatu sweep plan`)."""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from tatu.daemon.config import ConfigError, RunConfig, known_variables, load_config
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
        parsed = saved_config(config)
        if parsed is None:
            continue
        slots.append(statistics.median(steps) / slot_tokens(parsed))
        evals += [record.seconds for record in files.eval_records() if record.step > 0]
        used.append(run_dir.name)
    if not slots:
        return None
    return StepCost(statistics.median(slots), statistics.median(evals) if evals else 0.0, ", ".join(used[:3]))


def slot_tokens(config: RunConfig) -> int:
    """A step's micro-batches x micro_batch x seq_len, as the run itself counts its mix (RunConfig.mix)."""
    return max(1, sum(config.mix.values())) * config.micro_batch * config.seq_len


def saved_config(saved: dict) -> RunConfig | None:
    """A checkpoint's meta.json "config" (RunConfig.to_json) parsed as the daemon parses its environment:
    a value equal to its default is left to it (as if unset: a TATU_EWC_BATCHES the run never set is
    not "set"), as is a variable this version does not know; None when it is not a run's."""
    known, defaults = set(known_variables()), RunConfig.defaults_json()
    try:
        return load_config({k: str(v) for k, v in saved.items()
                            if k in known and v is not None and (k not in defaults or v != defaults[k])})[0]
    except ConfigError:
        return None


def member_seconds(member: Member, cost: StepCost) -> float:
    config, _ = load_config(member.env)  # the member's run configuration, its defaults the daemon's
    evals = config.mix_steps_limit // config.eval_every + 2  # the baseline and the last step
    return config.mix_steps_limit * slot_tokens(config) * cost.seconds_per_slot + evals * cost.eval_seconds


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

"""What a sweep will cost, from what earlier runs of this machine measured (`tatu sweep plan`).

Why the estimate was short (issue 36: 6m08s estimated, 10m31s taken, on a 2-core AMD EPYC): the
per-token rate came from the seed checkpoint's run, the trunk, which trained on every core, while
the members run with TATU_THREADS=1, K of them at once on those cores; and K members took
total / K of wall time, as if members of unequal length packed perfectly. Now:

- a measurement keeps the threads its run had (TATU_THREADS, else every core: torch's default),
  and runs at the members' own thread count are preferred (the sweep's finished members);
- otherwise the training rate is moved to the members' threads by Amdahl's law with
  PARALLEL_FRACTION (the evals are not: measured no slower at one thread), and a member never
  gets more cores than cores // K;
- the wall time is the members scheduled in plan order onto K slots, each to the first one free
  (what the coordinator does), not the sum over K.
"""
from __future__ import annotations

import heapq
import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from tatu.daemon.config import ConfigError, RunConfig, known_variables, load_config
from tatu.daemon.run.paths import RunDir, SweepDir
from tatu.model.checkpoint.files import CheckpointError, read_meta
from tatu.sweep.plan.member import Member


# The share of a training step that scales with threads (Amdahl's p). Measured on make demo's own
# runs (2-core AMD EPYC, AVX-512, /work/demo-run/demo): the trunk at 2 threads took 0.373 s for a
# 4096-token step (9.1e-5 s per token slot), the members at TATU_THREADS=1, two at once,
# 1.838 s for 14336 (1.28e-4): a speedup of 1.28 / 0.91 = 1.40 from 1 to 2 threads, and
# 1 / 1.40 = (1 - p) + p / 2 gives p = 0.57.
PARALLEL_FRACTION = 0.57


def thread_factor(measured_threads: int, threads: int, parallel_fraction: float = PARALLEL_FRACTION) -> float:
    """How much longer a step takes at `threads` than at `measured_threads` (Amdahl's law)."""
    def at(n: int) -> float:
        return (1.0 - parallel_fraction) + parallel_fraction / max(1, n)
    return at(threads) / at(measured_threads)


def cores() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class StepCost:
    seconds_per_slot: float  # seconds per micro-batch x micro_batch x seq_len of a training step
    eval_seconds: float
    source: str
    threads: int | None = None  # the threads the measuring runs had (None: unknown, taken as the members')


def _run_threads(config: dict) -> int:
    """The intra-op threads a run had: its TATU_THREADS, else torch's default (every core)."""
    threads = config.get("TATU_THREADS")
    return int(threads) if isinstance(threads, (int, str)) and str(threads).isdigit() else cores()


def measured_cost(runs: list[Path], threads: int | None = None) -> StepCost | None:
    """Step and eval times measured by earlier runs of this machine (their events and the
    config in their checkpoints' metadata); those that ran at `threads` when there are any."""
    measured = []  # (threads, seconds per slot, eval seconds, name)
    for run_dir in runs:
        files = RunDir(run_dir)
        config = None
        for ckpt in (files.final, files.state, files.best):
            try:
                config = read_meta(ckpt).get("config")
            except CheckpointError:  # not written yet (or refused: a measurement is not worth a corrupt file)
                continue
            break
        if not files.events_file.is_file() or not config:
            continue
        steps = [e["seconds"] for e in files.events("step") if e.get("seconds")]
        if not steps:
            continue
        parsed = saved_config(config)
        if parsed is None:
            continue
        evals = [record.seconds for record in files.eval_records() if record.step > 0 and record.seconds]
        measured.append((_run_threads(config), statistics.median(steps) / slot_tokens(parsed), evals, run_dir.name))
    if not measured:
        return None
    same = [m for m in measured if m[0] == threads]
    if same:
        measured = same
    else:  # one thread count: the most common (the trunk alone, before any member has run)
        common = statistics.mode([m[0] for m in measured])
        measured = [m for m in measured if m[0] == common]
    evals = [e for m in measured for e in m[2]]
    return StepCost(statistics.median(m[1] for m in measured), statistics.median(evals) if evals else 0.0,
                    ", ".join(m[3] for m in measured[:3]), measured[0][0])


def slot_tokens(config: RunConfig) -> int:
    """A step's micro-batches x micro_batch x seq_len, as the run itself counts its mix (RunConfig.mix)."""
    return max(1, sum(config.mix.values())) * config.micro_batch * config.seq_len


def saved_config(saved: dict) -> RunConfig | None:
    """A checkpoint's metadata's "config" (RunConfig.to_json) parsed as the daemon parses its environment:
    a value equal to its default is left to it (as if unset: a TATU_EWC_BATCHES the run never set is
    not "set"), as is a variable this version does not know; None when it is not a run's."""
    known, defaults = set(known_variables()), RunConfig.defaults_json()
    try:
        return load_config({k: str(v) for k, v in saved.items()
                            if k in known and v is not None and (k not in defaults or v != defaults[k])})[0]
    except ConfigError:
        return None


def member_threads(config: RunConfig, k: int) -> int:
    """The cores a member computes on with K members at once: its TATU_THREADS (torch's default, every
    core, when unset), never more than its share of the machine's cores."""
    return max(1, min(config.threads or cores(), cores() // max(1, k)))


def member_seconds(member: Member, cost: StepCost, k: int | None = None) -> float:
    """One member's seconds: its steps' token slots at the measured rate, moved to the threads it
    runs at (thread_factor) when the measurement ran at others, and its evals. k None: as measured."""
    config, _ = load_config(member.env)  # the member's run configuration, its defaults the daemon's
    evals = config.mix_steps_limit // config.eval_every + 2  # the baseline and the last step
    factor = 1.0
    if k is not None and cost.threads is not None:
        factor = thread_factor(cost.threads, member_threads(config, k))
    # The evals are not moved: the demo's members evaluated in 2.9 s at one thread, the trunk in
    # 4.8 s at two (/work/demo-run/demo's events): an eval is not a training step's thread-bound work.
    return config.mix_steps_limit * slot_tokens(config) * cost.seconds_per_slot * factor + evals * cost.eval_seconds


def schedule_seconds(durations: list[float], k: int) -> float:
    """Wall seconds of jobs run in this order on k slots, each started on the first slot free (the
    coordinator's order): not sum / k, which assumes unequal members pack perfectly."""
    slots = [0.0] * max(1, k)
    for seconds in durations:
        heapq.heapreplace(slots, slots[0] + seconds)  # slots is a heap: [0] is the first free
    return max(slots)


def estimate(plan, out: Path, shown: list[Member], k: int | None = None) -> tuple[StepCost | None, float | None]:
    """(the measured StepCost or None, the seconds of runs `shown` takes in all, or None): from
    the runs already in the sweep's run dir and the run that made the seed checkpoint; k given,
    each member at the threads it gets with k at once."""
    runs = [Path(plan.base_env["TATU_SEED_CKPT"]).parent] if plan.base_env.get("TATU_SEED_CKPT") else []
    if out.is_dir():
        runs = sorted(p for p in out.iterdir() if p.is_dir()) + runs
    threads = {member_threads(load_config(m.env)[0], k or 1) for m in shown}
    cost = measured_cost(runs, threads.pop() if len(threads) == 1 else None)
    return cost, (sum(member_seconds(m, cost, k) for m in shown) if cost else None)


def wall_estimate(plan, out: Path, shown: list[Member], k: int) -> float | None:
    """Wall seconds of `shown` at K at a time (schedule_seconds over member_seconds at K); None unmeasured."""
    cost, _ = estimate(plan, out, shown, k)
    return None if cost is None else schedule_seconds([member_seconds(m, cost, k) for m in shown], k)


def unfinished_estimate(plan, sweep_dir: Path, k: int) -> float | None:
    """Wall seconds the members without a verdict take at K at a time, as `tatu sweep plan` estimates."""
    out = SweepDir(sweep_dir.absolute()).runs
    shown = plan.tune_members(out) + plan.compare_members(out, {plan.tune_var: plan.tune_values[0]} if plan.tune_var else None)
    return wall_estimate(plan, out, [m for m in shown if not RunDir(out / m.run).verdict_file.exists()], k)

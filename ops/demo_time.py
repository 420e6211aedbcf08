"""The demo's time left for the whole job (trunk, sweep, reports), from the trunk's measured step
and eval times (issue 36: an estimate that holds). Printed at the demo's start (unknown until the
trunk has steps), while the trunk trains, and after it.

    trunk    the steps left at the median measured step time, and the evals left at the median
             measured eval time (none measured yet: the step-0 eval's own time, else 0)
    sweep    sweep/run/cost.py's model: each member's token slots at the trunk's rate moved to the
             member's threads (Amdahl, PARALLEL_FRACTION), its evals, scheduled onto K slots
    reports  the sweep report re-scores the seed checkpoint and every member's end (one eval of
             the sets each: sweep/judge/scores.py), then the run report (RUN_REPORT_SECONDS)
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from tatu.formats import fmt_duration

# `tatu report` of the demo's six member runs took 11.6 s on the 2-core AMD EPYC (the crossed bands
# included: `time .venv/bin/tatu report demo/sweeps/demo-replay/runs/demo-replay.replay-n* --out /tmp/r6`).
RUN_REPORT_SECONDS = 15.0


@dataclass(frozen=True)
class TrunkProgress:
    """What the trunk's events say so far."""

    steps_done: int
    steps_total: int
    step_seconds: tuple[float, ...]  # each logged step's seconds
    eval_seconds: tuple[float, ...]  # each eval's seconds (step 0's included)
    evals_total: int  # evals the trunk makes in all (its baseline, every EVAL_EVERY, the last)
    slot_tokens: int  # micro-batches x micro_batch x seq_len of one trunk step
    threads: int  # the trunk's intra-op threads


@dataclass(frozen=True)
class JobEstimate:
    trunk_s: float
    sweep_s: float
    reports_s: float
    source: str = "the trunk's measured step and eval times, sweep/run/cost.py's model"  # what the seconds come from

    @property
    def total_s(self) -> float:
        return self.trunk_s + self.sweep_s + self.reports_s

    def line(self) -> str:
        return (f"time left: ~{fmt_duration(self.total_s)} (trunk {fmt_duration(self.trunk_s)}, sweep "
                f"{fmt_duration(self.sweep_s)}, reports {fmt_duration(self.reports_s)}; from {self.source})")


def job_estimate(progress: TrunkProgress, members: list, k: int) -> JobEstimate | None:
    """The time left, or None before the trunk has logged a step. members: the sweep's Members."""
    from tatu.sweep.run.cost import StepCost, member_seconds, schedule_seconds

    if not progress.step_seconds:
        return None
    step = statistics.median(progress.step_seconds)
    evaluation = statistics.median(progress.eval_seconds) if progress.eval_seconds else 0.0
    evals_left = max(0, progress.evals_total - len(progress.eval_seconds))
    trunk = (progress.steps_total - progress.steps_done) * step + evals_left * evaluation
    cost = StepCost(step / progress.slot_tokens, evaluation, "trunk", progress.threads)
    sweep = schedule_seconds([member_seconds(m, cost, k) for m in members], k)
    reports = (len(members) + 1) * evaluation + RUN_REPORT_SECONDS
    return JobEstimate(trunk, sweep, reports)


def reports_estimate(run_dirs, n_members: int) -> JobEstimate:
    """What is left once the sweep has run: its report's re-scoring and the run report, at the
    median eval time of `run_dirs` (the sweep's members: the sets the report scores)."""
    from tatu.daemon.run.paths import RunDir

    evals = [e["seconds"] for run_dir in run_dirs for e in RunDir(run_dir).events("eval") if e.get("seconds")]
    return JobEstimate(0.0, 0.0, (n_members + 1) * (statistics.median(evals) if evals else 0.0) + RUN_REPORT_SECONDS,
                       "the sweep's members' measured eval times")

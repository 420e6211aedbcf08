"""Members compared at the same step: the last eval step every member of a stage reached.

A member that aborts ends at its abort's eval (step 8), a finished one at MIX_STEPS_LIMIT (24):
compared at their ends, the finished one has 16 more steps of training in its numbers. So every
comparison is also made at the common step. Its per-line scores are the daemon's own, kept by
TATU_EVAL_LINES=1 (which every sweep member runs with) in RUN_DIR/evals/step-N.json: the step-0
eval's lines are the start and step N's the end, scored on the device the run used. The end
comparison stays as it was (re-scored checkpoints, sweep/judge/scores.py). A member run without those
files (a sweep locked before they existed) leaves the common-step comparison n/a, said so.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from tatu.daemon.run.paths import RunDir
from tatu.sweep.judge.records import ConfigResult, EvalDrifts, MemberResult, PairedDiff
from tatu.sweep.judge.scores import category_entries

START, AT_COMMON = "start@0", "end@common"  # the keys of a member result that hold these lines
COMMON_LINES = (START, AT_COMMON)  # the base/end keys of the common-step lines, as (base, end)


def lines_at(run_dir: Path, step: int) -> dict | None:
    """{set: {"nll_sum", "line_tokens", "line_index"}} as the daemon scored them at `step`, every set
    and each tagged set's categories ("sftHeld/noun", the lines with a token of it); None if not kept."""
    path = RunDir(run_dir).eval_lines(step)
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    out = {name: {"nll_sum": s["lines"]["nll_sum"], "line_tokens": s["lines"]["n_tokens"],
                  "line_index": s["lines"]["index"]} for name, s in doc["sets"].items()}
    for name, per in (doc.get("categories") or {}).items():  # absent in files written before categories were kept
        for category, r in per.items():
            lines = r["lines"]
            out.update(category_entries(name, {category: (lines["nll_sum"], lines["n_tokens"])}, lines["index"]))
    return out


def common_step(results: list[MemberResult]) -> int | None:
    """The last eval step every member with a result reached (None before any has one)."""
    steps = [r.steps for r in results if r.has("end")]
    return min(steps) if steps else None


def attach(results: list[MemberResult], run_dirs: dict[str, Path], step: int | None
           ) -> tuple[dict[str, MemberResult], str | None]:
    """Each member's result with its start and step-`step` lines, by member name (those that have
    them); the reason when some member has not."""
    if step is None:
        return {}, "no member has finished"
    missing, attached = [], {}
    for r in results:
        if not r.has("end"):
            continue
        start, end = lines_at(run_dirs[r.member], 0), lines_at(run_dirs[r.member], step)
        if start is None or end is None:
            missing.append(r.member)
            continue
        attached[r.member] = dataclasses.replace(r, lines={**r.lines, START: start, AT_COMMON: end})
    if missing:
        return attached, f"no per-line scores kept at step {step} (TATU_EVAL_LINES) for {', '.join(missing)}"
    return attached, None


def worst_drift_until(evals: EvalDrifts, step: int) -> tuple[float, float]:
    """(value, hi) of the worst drift over a member's evals up to `step`."""
    kept = [(v, hi) for s, v, hi in evals.eval_drifts if s <= step]
    return max((v for v, _ in kept), default=0.0), max((hi for _, hi in kept), default=0.0)


def end_text(c: ConfigResult) -> str:
    """The members' last eval steps, and where some aborted, at which step: `24`, `8 (aborted at 8)`."""
    steps = ",".join(str(s) for s in c.end_steps) or "-"
    aborted = sorted({r.steps for r in c.results if r.state == "aborted" and r.steps is not None})
    return steps + (f" (aborted at {','.join(str(s) for s in aborted)})" if aborted else "")


def equal_ends(c: ConfigResult, other: ConfigResult) -> bool:
    """Every member of both ended at one and the same step (a configuration with no member ended: no)."""
    return bool(c.end_steps) and bool(other.end_steps) and len(set(c.end_steps) | set(other.end_steps)) == 1


def compared_at(config: ConfigResult, other: ConfigResult, common: bool) -> dict:
    """Where a paired difference of `config` and `other` sets its sides: {"step": the common step, or
    the one step every member of both ended at} or {"unequal": both ends and why}. The one place a
    comparison's step is decided: add_paired stores it on each PairedDiff, every table, the prose and
    report.json read it there."""
    if common:
        return {"step": config.common_step}
    if equal_ends(config, other):
        return {"step": config.end_steps[0]}
    return {"unequal": f"{end_text(config)} vs {end_text(other)}"}


def like_with_like(config: ConfigResult, metric: str) -> tuple[PairedDiff | None, bool]:
    """(a configuration's paired difference with the baseline on `metric` like with like, whether it is
    the common step's): the common step's where the report has it, else the ends' (which carries
    `unequal` where the ends differ)."""
    at_common = (config.paired_common or {}).get(metric)
    return (at_common, True) if at_common else ((config.paired or {}).get(metric), False)


def seedwise_steps(config: ConfigResult, other: ConfigResult) -> tuple[int, ...] | None:
    """The steps at which each seed's pair of `config` and `other` sets its sides, sorted: every pair
    at one step on both sides (an interpolated member is its parent seed's end walked back, so it is
    at its parent's end step); None where some pair is not (unequal training side by side)."""
    by_seed = {r.seed: r.steps for r in other.results if r.has("end")}
    pairs = [(r.steps, by_seed[r.seed]) for r in config.results if r.has("end") and r.seed in by_seed]
    if any(a != b for a, b in pairs):
        return None
    return tuple(sorted({a for a, _ in pairs if a is not None}))

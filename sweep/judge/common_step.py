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
from tatu.sweep.judge.records import EvalDrifts, MemberResult
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

"""Members compared at the same step: the last eval step every member of a stage reached.

A member that aborts ends at its abort's eval (step 8), a finished one at MIX_STEPS_LIMIT (24):
compared at their ends, the finished one has 16 more steps of training in its numbers. So every
comparison is also made at the common step. Its per-line scores are the daemon's own, kept by
TATU_EVAL_LINES=1 (which every sweep member runs with) in RUN_DIR/evals/step-N.json: the step-0
eval's lines are the start and step N's the end, scored on the device the run used. The end
comparison reads the same files at the member's last eval (sweep/judge/analysis.py member_result). A
member run without those files (a sweep locked before they existed) leaves the common-step comparison
n/a, said so.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
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


# what sets a configuration's SFT tokens per step (daemon/config.py): micro-batches x sequences x tokens
TOKENS_PER_STEP = ("SFT_GE", "TATU_MICRO_BATCH", "TATU_SEQ_LEN")


def sft_tokens_per_step(effective: dict) -> int:
    """The SFT tokens a configuration's step trains on (its SFT micro-batches x micro-batch x sequence
    length: the budget its settings give, the same for every seed)."""
    return math.prod(int(effective[k]) for k in TOKENS_PER_STEP)


@dataclass(frozen=True)
class ComparisonPoint:
    """Where the configurations of a stage are compared like with like: at one step where every
    configuration trains the same SFT tokens per step (`tokens` None), else at equal SFT tokens seen
    (`tokens`: step x tokens per step), each configuration at its own step (`steps`, by config key)."""

    steps: dict[str, int]
    tokens: int | None = None

    def text(self) -> str:
        """`at step 8` or `at equal SFT tokens: 12,288`, as a row and a title say it."""
        if self.tokens is None:
            return f"at step {next(iter(self.steps.values()))}"
        return f"at equal SFT tokens: {self.tokens:,}"


def comparison_point(grouped: dict[str, list[MemberResult]], tokens_per_step: dict[str, int]) -> ComparisonPoint | None:
    """The one choice of where configurations are compared (`grouped`: each configuration's daemon-run
    results; `tokens_per_step`: each one's SFT tokens per step). Equal tokens per step: the last eval
    step every member reached. Otherwise the most SFT tokens every member saw by its last eval, each
    configuration at the step that reaches them, which must be an eval step every member of it ran
    (else the most tokens below that such steps give all: equal tokens or none). None before any member ends."""
    ended = {key: [r for r in rs if r.has("end")] for key, rs in grouped.items()}
    ended = {key: rs for key, rs in ended.items() if rs}
    if not ended:
        return None
    if len({tokens_per_step[key] for key in ended}) == 1:
        step = min(r.steps for rs in ended.values() for r in rs)
        return ComparisonPoint({key: step for key in ended})
    evals = {key: set.intersection(*(_eval_steps(r) for r in rs)) for key, rs in ended.items()}
    # the SFT tokens each configuration reaches at one of its common eval steps; the most all reach
    reach = {key: {step * tokens_per_step[key] for step in steps} for key, steps in evals.items()}
    shared = set.intersection(*reach.values()) - {0}
    if not shared:
        return None
    tokens = max(shared)
    return ComparisonPoint({key: tokens // tokens_per_step[key] for key in ended}, tokens)


def _eval_steps(result: MemberResult) -> set[int]:
    """The eval steps a member ran (its evals' steps, then its end)."""
    steps = {s for s, _, _ in result.evals.eval_drifts} if result.evals else set()
    return steps | {result.steps}


def attach(results: list[MemberResult], run_dirs: dict[str, Path], point: ComparisonPoint | None
           ) -> tuple[dict[str, MemberResult], str | None]:
    """Each member's result with its start lines and its configuration's comparison step's, by member
    name (those that have them); the reason when some member has not."""
    if point is None:
        return {}, "no member has finished, or no SFT token count every configuration reaches at an eval"
    missing, attached = [], {}
    for r in results:
        if not r.has("end") or r.config not in point.steps:
            continue
        step = point.steps[r.config]
        start, end = lines_at(run_dirs[r.member], 0), lines_at(run_dirs[r.member], step)
        if start is None or end is None:
            missing.append(r.member)
            continue
        attached[r.member] = dataclasses.replace(r, lines={**r.lines, START: start, AT_COMMON: end})
    if missing:
        return attached, f"no per-line scores kept {point.text()} (TATU_EVAL_LINES) for {', '.join(missing)}"
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


@dataclass(frozen=True)
class ComparedAt:
    """Where a paired difference set its two sides: one `step` both reached, or, at equal SFT tokens,
    each side at its own step (`at`: "equal SFT tokens: 12,288 (steps 16 vs 8)"), or unequal ends
    (`unequal`: both ends and why, "24 vs 8 (aborted at 8)"), which concludes no direction."""

    step: int | None = None
    unequal: str | None = None
    at: str | None = None

    def text(self) -> str:
        """`step 8`, `equal SFT tokens: ...` or `24 vs 8 (aborted at 8): unequal ends`."""
        if self.unequal is not None:
            return f"{self.unequal}: unequal ends"
        return self.at if self.at is not None else f"step {self.step}"


def compared_at(config: ConfigResult, other: ConfigResult, common: bool) -> ComparedAt:
    """Where a paired difference of `config` and `other` sets its sides: at the common step (or equal
    SFT tokens), or at the one step every member of both ended at, or at unequal ends. The one place a
    comparison's step is decided: add_paired stores it on each PairedDiff, every table, the prose and
    report.json read it there."""
    if common and config.common_tokens is not None and config.common_step != other.common_step:
        return ComparedAt(at=f"equal SFT tokens: {config.common_tokens:,} (steps {config.common_step} vs {other.common_step})")
    if common:
        return ComparedAt(step=config.common_step)
    if equal_ends(config, other):
        return ComparedAt(step=config.end_steps[0])
    return ComparedAt(unequal=f"{end_text(config)} vs {end_text(other)}")


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

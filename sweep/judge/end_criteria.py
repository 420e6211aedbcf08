"""The rule's criteria a look does not decide, judged once a configuration's looks pass: the worst
drift over every eval (`every_eval_drift[_hi] < VALUE`) and the aborted members (`aborted < VALUE`),
over the members the passing look was decided on. A configuration whose looks pass and one of these
fails is a fail: `first config` goes on to the next, a fixed sequence stops there.

They are read from the members' run dirs (their eval events and verdicts: no scoring), so the
coordinator, `tatu sweep status` and the report all judge them from the same files at no cost,
as sweep/judge/analysis.member_result reads them. Any other criterion a look does not decide (a point
estimate, a CI's lower bound) has no sequential meaning here: the plan is refused (design.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tatu.daemon.run.view import read_run
from tatu.sweep.plan.rule import Condition

@dataclass(frozen=True)
class EndFacts:
    """One member's facts the end criteria read."""

    every_eval_drift: float     # the worst drift over its evals after step 0 (0 without any)
    every_eval_drift_hi: float  # the worst upper bound of its drift CI over them
    aborted: bool               # MIX_FORGET_LIMIT stopped it


def member_end_facts(run_dir: Path) -> EndFacts:
    """From a member's run dir (tatu.sweep.plan.member.Member.run_dir)."""
    run = read_run(run_dir)
    evals = [record for record in run.evals if record.step > 0]
    verdict = run.verdict
    return EndFacts(max((e.drift.value for e in evals), default=0.0), max((e.drift.hi for e in evals), default=0.0),
                    bool(verdict and verdict.numbers and verdict.numbers.aborted))


@dataclass(frozen=True)
class EndFailure:
    """An end criterion that failed: the condition as written, the value over the members, the
    threshold it was held to, the value shown."""

    condition: str   # every_eval_drift_hi < MIX_FORGET_LIMIT
    measured: float  # the worst over the members (a count for aborted)
    threshold: float  # MIX_FORGET_LIMIT's value in the members' effective config
    shown: str       # +12.0%

    def text(self) -> str:
        return f"{self.condition} fails ({self.shown})"


def end_failures(conditions: tuple[Condition, ...], effective: dict, facts: list[EndFacts]) -> tuple[EndFailure, ...]:
    """Each end criterion that fails over these members."""
    out = []
    for condition in conditions:
        if condition.metric == "aborted":
            value = float(sum(f.aborted for f in facts))
            shown = f"{value:.0f}"
        else:
            value = max(getattr(f, condition.metric) for f in facts)
            shown = f"{value * 100:+.1f}%"
        if not condition.holds(value, effective):
            out.append(EndFailure(condition.text(), value, condition.threshold(effective), shown))
    return tuple(out)

"""Small typed records for tests that need one without running an eval (daemon/run/records.py) or a
sweep member (sweep/judge/records.py)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tatu.daemon.run.records import Change, Criteria, EvalRecord, SetSummary, Verdict, VerdictNumbers
from tatu.sweep.judge.records import ConfigResult, MemberResult, SweepVerdict
from tatu.sweep.judge.sweep_report import CompareStage, SweepReport
from tatu.sweep.plan.interpolate import InterpolateSpec
from tatu.sweep.plan.load import Plan
from tatu.sweep.plan.rule import parse_rule


def set_summary(ppl: float = 10.0, n_lines: int = 100, n_lines_total: int | None = None) -> SetSummary:
    return SetSummary(ppl, ppl * 0.9, ppl * 1.1, 0.1, 1.0, 1.0, n_lines,
                      n_lines if n_lines_total is None else n_lines_total, 40 * n_lines)


def eval_record(step: int = 0, drift: float = 0.0, **fields) -> EvalRecord:
    """An eval at `step` whose drift is `drift` (CI +-1 point), every other field empty unless given."""
    record = EvalRecord(step=step, sets={"enRuler": set_summary()}, warnings=[], changes={},
                        drift=Change(drift, drift - 0.01, drift + 0.01, 0.5, 0.02), drift_tronco=None, trunk_ok=True,
                        best=False, best_set="sftHeld", abort=None, notes={}, seconds=1.0, generations=None,
                        categories={}, categories_note=None, tasks={}, ci_covers={}, line=f"EVAL {step}: ...")
    return replace(record, **fields)


def verdict(outcome: str, aborted: str | None = None) -> Verdict:
    """A finished run's verdict (`aborted`: why MIX_FORGET_LIMIT stopped it), numbers at step 8."""
    change = Change(0.0, -0.01, 0.01, 0.5, 0.02)
    numbers = VerdictNumbers(8, "sftHeld", change, change, None, 0.0, 8, aborted)
    return Verdict(outcome, Criteria("improve", "forget limit", "flat"), f"VERDICT {outcome}: ...", numbers, {})


def member_result(config: str, seed: int, base: dict | None = None, end: dict | None = None,
                  state: str = "done", values: dict | None = None) -> MemberResult:
    """A member `config`-s`seed` with its per-line scores at its start and end ({set: scores}; none:
    it has no end yet)."""
    lines = {} if end is None else {"base": base, "end": end}
    return MemberResult(member=f"{config}-s{seed}", config=config, seed=seed, values=values or {}, state=state,
                        verdict=None, steps=8 if end is not None else None, lines=lines)


def config_result(key: str, values: dict, results, stats: dict | None, **fields) -> ConfigResult:
    """A configuration of the comparison stage without a common step, every other field empty unless given."""
    config = ConfigResult(key=key, values=values, results=tuple(results), stats=stats, categories=None,
                          stats_common=None, categories_common=None, common_step=None,
                          common_missing="no per-line scores kept", end_steps=(8,), trainable=None,
                          effective={"MIX_FORGET_LIMIT": 0.1}, half=None)
    return replace(config, **fields)


def rule_plan(rule: str, axes: dict[str, list[str]], path: Path | str = "plan.toml", configs: tuple[str, ...] = (),
              interpolate: InterpolateSpec | None = None) -> Plan:
    """A plan holding what a verdict reads of it: its rule (parsed as a lock's is), its axes, its
    configurations in order (each setting nothing) and its [interpolate]."""
    return Plan(Path(path), "plan", "", [1], {}, axes, {}, parse_rule(rule, axes, Path(path), list(configs)),
                configs={name: {} for name in configs}, interpolate=interpolate)


def rejudged(plan: Plan, rule: str) -> Plan:
    """The same plan under another rule: what its verdict would have been."""
    return replace(plan, rule=parse_rule(rule, plan.axes, plan.path, list(plan.configs)))


def sweep_report(verdict: SweepVerdict | None, configs: list[ConfigResult], complete: bool = True, **fields) -> SweepReport:
    """A judged sweep's report around these configurations and verdict (the other fields made up unless given)."""
    words = {"name": "dose", "question": "", "rule": verdict.rule if verdict else "", "plan_hash": "a" * 16,
             "plan_portable_hash": "b" * 16, "seeds": [1, 2, 3]}
    return SweepReport(**{**words, "compare": CompareStage(tuple(configs), complete), "verdict": verdict, **fields})

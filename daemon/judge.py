"""The Judge: per-set results -> drift, drift_tronco, best, abort; and at the end the verdict.

drift        = enRuler_ppl / enRuler_ppl at this run's step-0 baseline - 1  (what THIS run did)
drift_tronco = enRuler_ppl / enRuler_ppl of the trunk - 1                (carries the seed's inheritance)
Both come with a paired CI (evals.scoring.compare_results): the same lines are scored at every
eval, so the per-line differences are paired and the interval is far tighter than two
independent ones.

The verdict is judged against criteria fixed in the config before the run (the criterion is
written before the result):
  forgets      aborted by MIX_FORGET_LIMIT, or drift above the limit at any eval
  holds        sftHeld fell by more than its paired CI (and by more than TATU_VERDICT_MIN_GAIN)
               while drift stayed under the limit at every eval
  flat         both the sftHeld change and the final drift are within resolution (CIs include 0)
  inconclusive anything else (e.g. sftHeld improved but not beyond its CI while drift moved)
A trunk (TATU_MODE=pretrain) is judged on ptVal the same way; it cannot "forget".
Answers right (sets whose pairs carry answers) are measured and reported beside, never judged here.
Every CI here is over lines only: the eval record and the verdict say so (ci_covers.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tatu.daemon.ci_covers import ci_covers
from tatu.daemon.config import RunConfig
from tatu.daemon.run.records import (AnswerChange, AnswerSummary, Best, CategorySummary, Change, Criteria, EvalRecord,
                                     SetSummary, Verdict, VerdictNumbers)
from tatu.daemon.run.state import RunState
from tatu.daemon.suite import REFERENCE_SETS, RULER, Suite, best_set
from tatu.evals.choice import mcnemar_exact
from tatu.evals.forecast import Forecast
from tatu.evals.scoring import SetResult, compare_results
from tatu.formats import SET_NAMES, fmt_ci, fmt_interval, fmt_pct, fmt_ppl, fmt_share


def change(reference: SetResult, current: SetResult, config: RunConfig) -> Change:
    """current/reference - 1 over the same lines, with its paired CI, p-value and MDE."""
    paired = compare_results(reference, current, n_resamples=config.eval_resamples, seed=config.seed, per="token")
    return Change(current.ppl / reference.ppl - 1, paired.lo - 1, paired.hi - 1, paired.p_value, paired.mde)


def summary(result: SetResult) -> SetSummary:
    """What an eval event shows of one set (the per-line sums stay in the resume state)."""
    return SetSummary(result.ppl, result.ci.lo, result.ci.hi, result.ci.se, result.bpc, result.bpb, result.n_lines,
                      result.n_lines_total, int(result.n_tokens))


def trunk_reference(results: dict[str, SetResult]) -> dict[str, SetResult]:
    """What a trunk stores so SFT runs from it can compute drift_tronco."""
    return {name: results[name] for name in REFERENCE_SETS if name in results}


def reference_for_lines(reference: SetResult | None, current: SetResult, config: RunConfig) -> SetResult | None:
    """The trunk's ruler result on the lines scored now; None (drift_tronco n/a) when the trunk
    was scored on another ruler file: a ratio over different lines would mean nothing."""
    if reference is None or reference.n_lines_total != current.n_lines_total:
        return None
    ours, theirs = current.extra.get("file_sha256"), reference.extra.get("file_sha256")
    if ours and theirs and ours != theirs:
        return None
    return reference.restricted_to(current.line_index, current.lines_sha256, config.eval_resamples, config.seed)


def eval_line(step: int, results: dict, drift: Change, drift_tronco: Change | None, trunk_ok, best: bool, seconds: float,
              notes: dict, changes: dict[str, Change] | None = None, answers: dict[str, AnswerSummary] | None = None) -> str:
    """The contract line: `EVAL 8: sftHeld 9.0702 ptVal 31.20 enRuler 52.10 drift +0.0% drift_tronco +14.7% trunk_ok=True best=True (71.2s)`;
    then the extras, every other eval set as `ptFaq 40.12 ptFaq_change=+1.3%`, and last the answers
    right of each set with answers as `sftHeld_exact=4.7% sftHeld_exact_ci=[1.6%,12.9%]`."""
    def ppl(name):
        return fmt_ppl(results[name].ppl, name) if name in results else "n/a"

    line = (
        f"EVAL {step}: sftHeld {ppl('sftHeld')} ptVal {ppl('ptVal')} enRuler {ppl('enRuler')} "
        f"drift {fmt_pct(drift.value)} drift_tronco {fmt_pct(drift_tronco.value if drift_tronco else None)} "
        f"trunk_ok={'n/a' if trunk_ok is None else trunk_ok} best={best} ({seconds:.1f}s)"
    )
    # At step 0 the ruler is compared with itself: there is no interval or resolution to show.
    mde = "n/a" if step == 0 else f"{drift.mde * 100:.1f}%"
    extras = f" drift_ci={fmt_interval(drift.lo, drift.hi)} mde={mde}"
    lines = notes.get(RULER, "").split()[:1]
    if lines and lines[0].split("/")[0] != lines[0].split("/")[-1]:  # only a subsample says so
        extras += f" enRuler_lines={lines[0]}"
    for name in results:
        if name not in SET_NAMES:
            extras += f" {name} {ppl(name)} {name}_change={fmt_pct(_value((changes or {}).get(name)))}"
    for name, answer in (answers or {}).items():
        extras += f" {name}_exact={fmt_share(answer.rate)} {name}_exact_ci={fmt_interval(answer.lo, answer.hi, fmt_share)}"
    return line + extras


def _value(change_: Change | None) -> float | None:
    return None if change_ is None else change_.value


def forecast_abort_reason(forecast: Forecast | None, config: RunConfig) -> str | None:
    """MIX_FORECAST_ABORT=1: why the run ends now: the forecast's lower bound at the last step passes
    MIX_FORGET_LIMIT (a forecast exists from the third eval on: daemon/forecast.py)."""
    if not config.mix_forecast_abort or forecast is None or not forecast.over_limit:
        return None
    return (f"forecast: drift at step {forecast.end} {fmt_pct(forecast.value)} {fmt_interval(forecast.lo, forecast.hi)} "
            f"({forecast.level:.0%}), lower bound > MIX_FORGET_LIMIT {config.mix_forget_limit * 100:.1f}% "
            f"(MIX_FORECAST_ABORT=1)")


@dataclass
class Decision:
    record: EvalRecord  # the eval event (every number)
    line: str
    best: bool
    abort_reason: str | None
    by_forecast: bool = False  # the abort is MIX_FORECAST_ABORT's: drift itself is still under the limit


def category_record(baseline: dict | None, categories: dict[str, dict[str, SetResult]], config: RunConfig
                    ) -> dict[str, dict[str, CategorySummary]]:
    """{set: {category: its summary and its paired change vs step 0 (None without a baseline)}}."""
    out = {}
    for name, per in categories.items():
        out[name] = {}
        for category, result in per.items():
            base = ((baseline or {}).get(name) or {}).get(category)
            out[name][category] = CategorySummary(summary(result),
                                                  change(base, result, config) if base is not None else None)
    return out


def task_items(result) -> dict:
    """What a task's step-0 baseline keeps: per-item correctness, for the paired test."""
    return {"correct": result.correct.tolist(), "correct_norm": result.correct_norm.tolist()}


def task_record(baseline: dict | None, tasks: dict) -> dict:
    """{task: acc and acc_norm with Wilson CIs, and each one's paired change vs step 0 (exact McNemar)}."""
    out = {}
    for name, result in tasks.items():
        out[name] = result.summary()
        base = (baseline or {}).get(name)
        for key, now in (("acc", result.correct), ("acc_norm", result.correct_norm)):
            then = None if base is None else base["correct" if key == "acc" else "correct_norm"]
            out[name][key]["change"] = None if then is None or len(then) != len(now) else mcnemar_exact(then, now)
    return out


def answer_bits(result) -> str:
    """A set's answers as its record and its step-0 baseline keep them: "1" right, "0" wrong, in file order."""
    return "".join("1" if right else "0" for right in result.correct.tolist())


def answer_record(baseline: dict[str, str] | None, answers: dict) -> dict[str, AnswerSummary]:
    """{set: its answers right (Wilson 95% over its items) and the change vs step 0 (exact McNemar
    over the same items; None without a step-0 baseline of the same items)}."""
    out = {}
    for name, result in answers.items():
        rate, bits = result.rate(), answer_bits(result)
        then = (baseline or {}).get(name)
        change_ = None
        if then is not None and len(then) == len(bits):
            test = mcnemar_exact(np.array([c == "1" for c in then]), result.correct)
            change_ = AnswerChange(test["diff"], test["only_a"], test["only_b"], test["p_value"])
        out[name] = AnswerSummary(rate.value, rate.lo, rate.hi, rate.n, rate.n_correct, result.n_unfinished, bits,
                                  list(result.outputs), change_)
    return out


def decide(step: int, results: dict[str, SetResult], state: RunState, suite: Suite, config: RunConfig,
           seconds: float, samples, categories: dict[str, dict[str, SetResult]] | None = None,
           tasks: dict | None = None, env_file: str | None = None, answers: dict | None = None,
           forecast: Forecast | None = None) -> Decision:
    """Compare with the run's baseline and the trunk; pick best; decide abort (not warn): drift over
    MIX_FORGET_LIMIT, or (MIX_FORECAST_ABORT=1) `forecast`'s lower bound at the last step over it."""
    baseline = state.baseline
    changes = {name: change(baseline[name], results[name], config) for name in results if name in baseline}
    drift = changes[RULER]
    trunk_ref = reference_for_lines((state.trunk_reference or {}).get(RULER), results[RULER], config)
    drift_tronco = change(trunk_ref, results[RULER], config) if trunk_ref else None
    if config.trunk_limit is None:
        trunk_ok = True
    else:
        trunk_ok = None if drift_tronco is None else drift_tronco.value <= config.trunk_limit
    key = best_set(config.mode)
    best = state.best is None or results[key].ppl < state.best.ppl
    abort_reason, by_forecast = None, False
    if config.mode == "sft":
        measured = drift.lo if config.mix_forget_ci else drift.value
        if measured > config.mix_forget_limit:
            which = "drift CI lower bound" if config.mix_forget_ci else "drift"
            abort_reason = f"{which} {fmt_pct(measured)} > MIX_FORGET_LIMIT {config.mix_forget_limit * 100:.1f}%"
        else:
            abort_reason = forecast_abort_reason(forecast, config)
            by_forecast = abort_reason is not None
    answered = answer_record(state.answer_baseline, answers or {})
    line = eval_line(step, results, drift, drift_tronco, trunk_ok, best, seconds, suite.notes, changes, answered)
    if forecast is not None:  # last on the line: nothing before it moves
        line += forecast.line_extras()
    sets = {name: summary(result) for name, result in results.items()}
    record = EvalRecord(
        step=step,
        sets=sets,
        warnings=[r.warning() for r in results.values() if r.warning()],
        changes=changes,
        drift=drift,
        drift_tronco=drift_tronco,
        trunk_ok=trunk_ok,
        best=best,
        best_set=key,
        abort=abort_reason,
        notes=suite.notes,
        seconds=round(seconds, 3),
        generations=samples,
        categories=category_record(state.category_baseline, categories or {}, config),
        categories_note=suite.category_note,
        tasks=task_record(state.task_baseline, tasks or {}),
        ci_covers=ci_covers(sets, list(sets), config, env_file).to_json(),
        line=line,
        answers=answered,
        forecast=forecast,
    )
    return Decision(record, line, best, abort_reason, by_forecast)


def best_of(decision: Decision, results: dict[str, SetResult]) -> Best:
    """The Best record of an eval that decided best."""
    key = decision.record.best_set
    return Best(decision.record.step, key, results[key].ppl)


def criteria(config: RunConfig) -> Criteria:
    key = best_set(config.mode)
    return Criteria(
        improve=f"{key} paired CI upper bound < "
                + (f"-{config.verdict_min_gain * 100:.1f}%" if config.verdict_min_gain else "0")
                + " vs step 0",
        forget_limit=f"drift <= {config.mix_forget_limit * 100:.1f}% at every eval"
        + (" (CI lower bound)" if config.mix_forget_ci else ""),
        flat=f"{key} change CI and final drift CI both include 0",
    )


def verdict(history: list[EvalRecord], abort_reason: str | None, config: RunConfig, env_file: str | None = None
            ) -> Verdict:
    key = best_set(config.mode)
    if not history:
        return Verdict("inconclusive", criteria(config), reason="no evaluation ran")
    last = history[-1]
    set_change = last.changes.get(key)
    drift = last.drift
    trained = [h for h in history if h.step > 0] or history  # step 0 is the baseline: drift 0 by definition
    worst = max(trained, key=lambda h: h.drift.value)
    worst_drift = worst.drift.value
    over_limit = config.mode == "sft" and any(
        (h.drift.lo if config.mix_forget_ci else h.drift.value) > config.mix_forget_limit for h in history
    )
    improved = set_change is not None and set_change.hi < -config.verdict_min_gain
    change_flat = set_change is not None and set_change.includes_zero()
    drift_flat = drift.includes_zero()
    if abort_reason or over_limit:
        outcome = "forgets"
    elif improved:
        outcome = "holds"
    elif change_flat and drift_flat:
        outcome = "flat"
    else:
        outcome = "inconclusive"
    numbers = VerdictNumbers(step=last.step, set_name=key, set_change=set_change, drift=drift,
                             drift_tronco=last.drift_tronco, worst_drift=worst_drift, worst_drift_step=worst.step,
                             aborted=abort_reason)
    change_text = set_change.text() if set_change else fmt_ci(None, None, None)
    line = (
        f"VERDICT {outcome}: {key} {change_text} "
        f"drift {drift.text()} "
        f"at step {last.step}; worst drift {fmt_pct(worst_drift)} at step {worst.step}"
        + (f" (aborted: {abort_reason})" if abort_reason else "")
    )
    covers = ci_covers(last.sets, (key, RULER), config, env_file)
    return Verdict(outcome, criteria(config), f"{line}; {covers.text}", numbers, covers.to_json())

"""A sweep's numbers: per-member results, per-configuration statistics over seeds, paired
comparisons with the baseline, and the report (SweepReport) with the locked rule's verdict
(decided in judge/verdict.py).

Everything here is a pure function of the lock, the members' run dirs and checkpoints: the
same files give the same numbers (fixed resampling seeds), however often and by whatever
coordinator the sweep was run. Statistics (tatu.evals.seeds.stats) are on the log scale of the
paired perplexity ratio end/start and shown as relative changes: drift (enRuler), the
sftHeld change, every held-out set's change and each word category's (sweep/judge/sets.py). With a tune stage, sftHeld is judged on its judge half only (odd line
indices); the tune stage chose on the dev half (even ones); the ruler never chooses. Every
comparison is made at the members' ends and at the common step (sweep/judge/common_step.py); the rule
judges the one it names.
"""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from tatu.model.checkpoint.files import CheckpointError, read_meta
from tatu.sweep.plan.interpolated import InterpolatedMember, interpolated_members
from tatu.sweep.judge.interpolated import interpolated_result
from tatu.sweep.judge.vs_parent import vs_parent
from tatu.daemon.run.paths import RunDir
from tatu.daemon.run.view import read_run
from tatu.exitcodes import BAD_CONFIG, BAD_DATA
from tatu.sweep.errors import SweepError
from tatu.sweep.judge.outcome import outcome_of
from tatu.sweep.plan.member import Member
from tatu.sweep.plan.lock import LockedPlan, read_lock
from tatu.sweep.plan.rule import held_out_set
from tatu.sweep.judge import common_step as common_step_
from tatu.sweep.judge.scores import end_checkpoint
from tatu.sweep.judge.power import seeds_for_effect, stated_effect
from tatu.sweep.judge.sets import set_stats
from tatu.sweep.judge.records import ConfigResult, ConfigStat, EvalDrifts, MemberResult, holm_adjusted
from tatu.sweep.judge.looks_check import check_looks
from tatu.sweep.judge.verdict import verdict
from tatu.sweep.judge.stats import paired_stats
from tatu.sweep.judge.sweep_report import CompareStage, SweepReport, TuneStage
from tatu.sweep.judge.answers import answer_metrics, config_answers, paired_answers

def member_result(member: Member, sweep_dir: Path, required: tuple[str, ...] = ()) -> MemberResult:
    """Status, verdict, the daemon's own per-line scores at its start (step 0) and its end (its last
    eval: the limit, or its abort's), every set and category (the held-out sets a rule names
    `required` must be there), the worst drift over its evals: its run's one view, read once."""
    view = read_run(member.run_dir)
    status = outcome_of(view)
    directory = member.run_dir
    result = MemberResult(member=member.run, config=member.config_key, seed=member.seed, values=member.values,
                          state=status.state, verdict=status.verdict)
    if status.state not in ("done", "aborted"):
        return result
    evals = {record.step: record for record in view.evals if record.step > 0}
    end_step = max(evals) if evals else 0
    start, end_lines = common_step_.lines_at(directory, 0), common_step_.lines_at(directory, end_step)
    if start is None or end_lines is None:
        raise SweepError(BAD_DATA, f"{directory}: no per-line scores kept at step {0 if start is None else end_step} "
                                   f"({RunDir(directory).eval_lines(0 if start is None else end_step)}): a sweep "
                                   "member runs with TATU_EVAL_LINES=1 and keeps them at every eval")
    for name in required:
        if name not in end_lines:
            raise SweepError(BAD_CONFIG, f"the decision rule names {name}_change, but {member.run}'s data has no "
                                         f"eval set {name} (its eval lines: {', '.join(k for k in end_lines if '/' not in k)})")
    lines = {"base": start, "end": end_lines}
    # what trained, as the daemon said it ("trainable 1.3M of 27.1M (4.8%): h.6-7, ln_f"); None for older runs
    end = end_checkpoint(directory)
    trainable = (_end_meta(end).get("trainable") or {}).get("line") if end else None
    drifts = EvalDrifts(every_eval_drift=max((e.drift.value for e in evals.values()), default=0.0),
                        every_eval_drift_hi=max((e.drift.hi for e in evals.values()), default=0.0),
                        daemon_drift=evals[end_step].drift.value if evals else None,
                        eval_drifts=tuple((step, e.drift.value, e.drift.hi) for step, e in sorted(evals.items())))
    return dataclasses.replace(result, steps=end_step, trainable=trainable, evals=drifts, lines=lines)


def _end_meta(end: Path) -> dict:
    """The end checkpoint's metadata, verified (SweepError 65 naming the file when it is not what its manifest says)."""
    try:
        return read_meta(end)
    except CheckpointError as exc:
        raise SweepError(BAD_DATA, str(exc)) from None


def _metrics(stats: dict[str, ConfigStat | None] | None, results: tuple[MemberResult, ...],
             common: int | None = None) -> dict | None:
    """The values a rule's conditions name, for one configuration (at the common step: its stats there)."""
    if stats is None:
        return None
    drift, change = stats.get("drift"), stats.get("sftHeld")
    usable = [r.evals for r in results if r.evals is not None]  # an interpolated member has no evals during training
    out = {"aborted": float(sum(r.state == "aborted" for r in results))}
    if drift:
        out.update(drift=drift.change.value, drift_lo=drift.change.lo, drift_hi=drift.change.hi)
    if change:
        out.update(sftHeld_change=change.change.value, sftHeld_change_lo=change.change.lo,
                   sftHeld_change_hi=change.change.hi)
    for name, held in stats.items():  # a held-out set a rule names: SET_change[_lo|_hi]
        if name not in ("drift", "sftHeld") and held:
            out.update({f"{name}_change": held.change.value, f"{name}_change_lo": held.change.lo,
                        f"{name}_change_hi": held.change.hi})
    if usable and common is None:
        out["every_eval_drift"] = max(e.every_eval_drift for e in usable)
        out["every_eval_drift_hi"] = max(e.every_eval_drift_hi for e in usable)
    elif usable:
        worst = [common_step_.worst_drift_until(e, common) for e in usable]
        out["every_eval_drift"], out["every_eval_drift_hi"] = max(v for v, _ in worst), max(hi for _, hi in worst)
    return out


def stage_table(locked: LockedPlan, members: list[Member], sweep_dir: Path, stage: str) -> list[ConfigResult]:
    """One entry per configuration: its members' results and its statistics over seeds."""
    half_sft = "judge" if locked.plan.tune_var and stage == "compare" else ("dev" if stage == "tune" else None)
    grouped: dict[str, list] = {}
    for m in members + (interpolated_members(locked.plan.interpolate, members) if stage == "compare" else []):
        grouped.setdefault(m.config_key, []).append(m)
    from tatu.daemon.config import load_config

    # every held-out set of the members' data is scored; the ones the rule names must be there
    rule = locked.plan.rule
    named = tuple(dict.fromkeys(n for n in (held_out_set(c.metric) for c in rule.conditions) if n))
    grouped_results = {key: [interpolated_result(m, sweep_dir, named) if isinstance(m, InterpolatedMember)
                             else member_result(m, sweep_dir, named) for m in group] for key, group in grouped.items()}
    # the common step is the daemon runs' (an interpolated member has no lines but its end's); where the
    # configurations train different SFT tokens per step, each one's step at equal SFT tokens seen
    ran = {key: [r for r in rs if not r.interpolated] for key, rs in grouped_results.items()}
    effective = {key: load_config(group[0].env)[0].to_json() for key, group in grouped.items()}
    point = common_step_.comparison_point({k: rs for k, rs in ran.items() if rs},
                                          {k: common_step_.sft_tokens_per_step(e) for k, e in effective.items()})
    with_common, why_not = common_step_.attach([r for rs in ran.values() for r in rs],
                                               {m.run: m.run_dir for m in members}, point)
    configs = []
    for index, (key, group) in enumerate(grouped.items()):
        # at one step, every configuration's (an interpolated one's too, though it has no lines there)
        common = None if point is None else point.steps.get(key) if point.tokens else next(iter(point.steps.values()))
        results = tuple(with_common.get(r.member, r) for r in grouped_results[key])
        stats, categories = set_stats(results, half_sft, index)
        skip = why_not or isinstance(group[0], InterpolatedMember)
        at_common, categories_common = (None, None) if skip else set_stats(results, half_sft, index, *common_step_.COMMON_LINES)
        configs.append(ConfigResult(
            key=key, values=group[0].values, results=results, stats=stats, categories=categories,
            stats_common=at_common, categories_common=categories_common, common_step=common, common_missing=why_not,
            common_tokens=(common * common_step_.sft_tokens_per_step(effective[key])
                           if point and point.tokens and common else None),
            end_steps=tuple(sorted({r.steps for r in results if r.has("end")})),
            trainable=next((r.trainable for r in results if r.trainable), None),
            effective=effective[key], half=half_sft,
            metrics=_metrics(stats, results), metrics_common=_metrics(at_common, results, common)))
    return configs


def add_paired(baseline: dict[str, str], configs: list[ConfigResult]) -> list[ConfigResult]:
    """Each configuration vs the baseline (the plan's: variable -> value), paired by seed, at the ends
    and at the common step, each difference with its step (common_step.compared_at); Holm over the
    comparisons made like with like, per metric and place: one at unequal ends is in no family (it
    sets unequal training side by side: no p Holm, no direction)."""
    base_key = _baseline_key(baseline, configs)
    baseline = next((c for c in configs if c.key == base_key), None)
    if baseline is None:
        return configs
    others = [c for c in configs if c is not baseline]
    variants = [("paired", ("base", "end"))] + ([("paired_common", common_step_.COMMON_LINES)] if baseline.stats_common else [])
    found: dict[str, dict[str, dict]] = {c.key: {} for c in others}  # config -> where -> metric -> PairedDiff
    for (where, lines), (metric, set_name) in itertools.product(variants, (("drift", "enRuler"), ("sftHeld", "sftHeld"))):
        compared = []
        for index, config in enumerate(others):
            paired = paired_stats(config.results, baseline.results, set_name, config.half, index, *lines)
            if paired:
                at = common_step_.compared_at(config, baseline, where == "paired_common")
                paired = dataclasses.replace(paired, step=at.step, unequal=at.unequal, at=at.at)
            found[config.key].setdefault(where, {})[metric] = paired
            if paired and paired.unequal is None:
                compared.append(config.key)
        for key, adjusted in zip(compared, holm_adjusted([found[k][where][metric] for k in compared])):
            found[key][where][metric] = adjusted
    return [dataclasses.replace(c, **found.get(c.key, {}), is_baseline=c is baseline) for c in configs]


def _with_answer_metrics(configs: list[ConfigResult], at_end, at_common) -> list[ConfigResult]:
    """Each configuration's metrics with its answers' (SET_exact_change[_lo|_hi], at its end and at the
    common step), where it has answers: a set without answers adds nothing (absent, never 0)."""
    end, common = answer_metrics(at_end), answer_metrics(at_common)
    return [dataclasses.replace(c, metrics=c.metrics and {**c.metrics, **end.get(c.key, {})},
                                metrics_common=c.metrics_common and {**c.metrics_common, **common.get(c.key, {})})
            for c in configs]


def _baseline_key(baseline: dict[str, str], configs: list[ConfigResult]) -> str | None:
    for config in configs:
        if all(config.values.get(k) == v for k, v in baseline.items()):
            return config.key
    return None


def analyze(sweep_dir: Path) -> SweepReport:
    """Every number of the report, from the lock and the members' files (report.json: its to_json)."""
    sweep_dir = Path(sweep_dir)
    locked = read_lock(sweep_dir)
    plan = locked.plan
    tune = compare = decided = seeds_for = None
    answers = answers_paired = ()
    if plan.tune_var:
        configs = stage_table(locked, locked.members_of("tune"), sweep_dir, "tune")
        tune = TuneStage(plan.tune_var, tuple(c.without_lines() for c in configs))
    members = locked.members_of("compare")
    if members:
        configs = stage_table(locked, members, sweep_dir, "compare")
        if plan.design:  # sequential: the looks log must agree with the run dirs (65 if not)
            check_looks(locked, sweep_dir, configs)
        configs = add_paired(plan.baseline, configs)
        parents = vs_parent(plan.interpolate, configs)
        run_dirs = {m.run: m.run_dir for m in members}
        answers = config_answers(configs, run_dirs)
        answers_paired = paired_answers(configs, run_dirs)
        configs = _with_answer_metrics(configs, answers, config_answers(configs, run_dirs, common=True))
        decided = verdict(locked, configs, sweep_dir)
        compare = CompareStage(tuple(c.without_lines() for c in configs), decided.complete, parents)
        seeds_for = seeds_for_effect(plan.rule, configs, stated_effect(plan.mde))
    # a lock written before the portable hash existed shows its own
    return SweepReport(plan.name, plan.question, plan.rule.text, locked.plan_hash,
                       locked.plan_portable_hash or locked.plan_hash, plan.seeds, plan.configs or None, tune,
                       locked.tuned, compare, decided, seeds_for, answers, answers_paired)

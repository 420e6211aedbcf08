"""`tatu sweep report` on a sequential sweep: every look recomputed from the run dirs (the same
config_looks_all the scheduler logged them with) and compared with sweeps/<name>/looks.jsonl. A
logged look the files recompute otherwise, one they do not allow, one logged twice, or (once no
member runs) one the files allow that was never logged: 65 and one line naming the file, the line
and the look. A decision nobody can reproduce from the files is not one to report. A look that pooled
the seed variance is recomputed on the members its line names as pooled, each of which must still
be finished at its logged step and the next of its configuration in seed order
(schedule.pool_source), or the look disagrees with the log."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from tatu.exitcodes import BAD_DATA
from tatu.sweep.errors import SweepError
from tatu.sweep.judge.records import ConfigResult, FailedCondition, SweepVerdict
from tatu.sweep.judge import looks_log
from tatu.sweep.judge.looks_log import LoggedLook, check_logged, look_key
from tatu.sweep.judge.schedule import (ConfigSchedule, Schedule, config_looks_all, grouped_members, pool_source,
                                       schedule, sequential_criteria)
from tatu.sweep.plan.lock import LockedPlan
from tatu.sweep.judge.looks_text import configurations, looks_lines, upper_bound


# The false pass at the threshold measured with tatu's own looks (bench/sequential.py --reps 20000,
# docs/sweeps.md): above the design's alpha / 2 at 3-5 seeds, so the sentence says both.
MEASURED_FALSE_PASS = {"obf": 0.037, "pocock": 0.043}
# the same for min_seeds = 2, the seed variance pooled across six configurations sharing it
# (bench/sequential.py --min-seeds 2 --reps 2000: MC SE 0.0016 and 0.0018, docs/sweeps.md)
MEASURED_POOLED_FALSE_PASS = {"obf": 0.030, "pocock": 0.040}


def runs_line(plan: Schedule, states: dict[str, str]) -> str:
    spent, fixed = plan.spent(states), plan.fixed_runs
    return (f"runs: {spent} of the fixed design's {fixed} ({plan.design.max_seeds} seeds x {len(plan.configs)} "
            f"configurations, {spent / fixed:.0%})" if fixed else "runs: none planned")


def verdict_clause(plan: Schedule, rule_text: str, axis: str) -> str:
    """`config=b (RULE); sequential obf, 3 to 5 seeds: ...the guarantee...` (or `no config satisfies
    ...`, `not decided yet: ...`): the verdict and its error guarantee, for status and the report."""
    design = plan.design
    measured = (MEASURED_POOLED_FALSE_PASS if design.pools_seed_variance else MEASURED_FALSE_PASS).get(design.shape, math.nan)
    guarantee = (f"sequential {design.shape}, {design.min_seeds} to {design.max_seeds} seeds: a configuration at its "
                 f"threshold passes a criterion with probability {design.alpha / 2:.1%} by design "
                 f"({measured:.1%} measured at few seeds, docs/sweeps.md)")
    if design.pools_seed_variance:
        most = max((l.pooled_configs for c in plan.configs for l in c.looks), default=len(plan.configs))
        guarantee += (f", its looks' seed variance pooled across up to {configurations(most)}, which assumes every "
                      "configuration has the same seed variance")
    if not plan.decided:
        active = [f"{c.config} ({c.seeds_looked} seeds looked)" for c in plan.configs if c.active]
        return f"not decided yet: {', '.join(active) or 'nothing'} under test; {guarantee}"
    if plan.chosen is None:
        return f"no {axis} satisfies the rule ({rule_text}); {guarantee}"
    return f"{axis}={plan.chosen} ({rule_text}); {guarantee}"


def verdict_sentence(plan: Schedule, rule_text: str, axis: str) -> str:
    clause = verdict_clause(plan, rule_text, axis)
    return f"verdict {clause}" if not plan.decided else f"verdict: {clause}"


def _named(entry: LoggedLook) -> str:
    return f"{entry.config} {entry.criterion} at {entry.look.n_seeds} seeds"


def recompute(locked: LockedPlan, configs: list[ConfigResult], logged: list[LoggedLook] | None = None) -> list[LoggedLook]:
    """Every look the files allow. `configs`: sweep/analysis.stage_table's comparison stage (its
    members' results with their per-line scores); `logged`: the looks log, whose pooled members a
    pooling design's looks are recomputed on (a look it lacks pools every other configuration's
    finished members)."""
    design = locked.plan.design
    criteria = sequential_criteria(locked.plan.rule)
    grouped = grouped_members(locked, design)
    every_result = {r.member: r for c in configs for r in c.results}

    def finished(member):
        result = every_result.get(member.name)
        return result if result is not None and result.has("end") else None

    out: list[LoggedLook] = []
    for config in configs:
        members = grouped.get(config.key)
        if not members or not criteria:  # an interpolated configuration is not scheduled: no looks
            continue
        by_name = {r.member: r for r in config.results}
        looks, _ = config_looks_all(design, config.key, criteria, config.effective,
                                    [by_name[m.name] for m in members], config.half,
                                    pool_source(grouped, config.key, logged or [], finished))
        out += looks
    return out


def check_looks(locked: LockedPlan, sweep_dir: Path, configs: list[ConfigResult]) -> list[LoggedLook]:
    """The logged looks, once they agree with the files (SweepError 65 otherwise)."""
    path = Path(sweep_dir) / looks_log.FILE
    logged = looks_log.read(sweep_dir)
    recomputed = {look_key(l): l for l in recompute(locked, configs, logged)}
    seen: dict[tuple, int] = {}
    for number, entry in enumerate(logged, 1):
        if look_key(entry) in seen:
            raise SweepError(BAD_DATA, f"{path}:{number}: {_named(entry)} is logged twice (first at line {seen[look_key(entry)]})")
        seen[look_key(entry)] = number
        if look_key(entry) not in recomputed:
            raise SweepError(BAD_DATA, f"{path}:{number}: {_named(entry)}: logged, but the run dirs allow no such look "
                                       f"(decision {entry.look.decision!r})")
    check_logged(path, logged, list(recomputed.values()))
    running = any(r.state == "running" for c in configs for r in c.results)
    missing = [l for key, l in recomputed.items() if key not in seen]
    if missing and not running:
        raise SweepError(BAD_DATA, f"{path}: {_named(missing[0])} ({missing[0].look.decision}): the run dirs allow it "
                                   "but it was never logged (`tatu sweep start` logs it, then the report)")
    return logged


def sequential_verdict(locked: LockedPlan, sweep_dir: Path, configs: list[ConfigResult], fixed: SweepVerdict) -> SweepVerdict:
    """The report's verdict from the looks, over `fixed` (sweep/analysis.decide's, the fixed design's
    rule on the seeds that ran): `chosen` and `line` (the verdict with its guarantee and the runs
    spent), `checks` (each configuration's failed criteria as its looks and end criteria decided
    them; not judged: not run, or undecided), `looks` (per configuration its decision and looks:
    lines), and `complete`: the looks decided the rule and every member the schedule let run has a
    result (the members it never needed are not missing results)."""
    run_of = {m.name: m.run for ms in grouped_members(locked, locked.plan.design).values() for m in ms}
    states = {run_of[r.member]: r.state for c in configs for r in c.results if r.member in run_of}
    plan = schedule(locked, states, looks_log.read(sweep_dir), None)
    rule = locked.plan.rule
    by_config = {c.config: c for c in plan.configs}
    checks = tuple(dataclasses.replace(check, **_judged(by_config[check.config])) if check.config in by_config else check
                   for check in fixed.checks)
    return dataclasses.replace(
        fixed, chosen=plan.chosen, line=f"{verdict_clause(plan, rule.text, rule.axis)}; {runs_line(plan, states)}",
        checks=checks,
        complete=plan.decided and all(states.get(run) in ("done", "aborted", "diverged") for run in plan.allowed),
        # the looks themselves, under the verdict (text and page); "more seeds would ..." is not
        # advice a locked sequential design can take (max_seeds is in the plan's hash)
        looks=tuple(looks_lines(plan, states)), would_change=())


def _judged(config: ConfigSchedule) -> dict:
    """A check's `failed` and `missing` (sweep/judge/records.py RuleCheck's) from the configuration's looks."""
    last: dict[str, LoggedLook] = {}
    for entry in config.looks:
        last[entry.criterion] = entry
    failed = [FailedCondition(e.criterion, math.expm1(upper_bound(e.look)), math.expm1(e.look.threshold),
                              f"{e.look.decision} at {e.look.n_seeds} seeds, CI at the spent level up to "
                              f"{math.expm1(upper_bound(e.look)) * 100:+.1f}%")
              for e in last.values() if e.look.decision in ("fail", "futility")]
    failed += [FailedCondition(f.condition, f.measured, f.threshold, f.shown) for f in config.end_failed]
    missing = []
    if config.decision == "diverged":
        missing = ["its looks (a member of its first seeds diverged)"]
    elif config.decision in ("waiting", "continue"):
        missing = ["its looks (not run: the rule was decided before it)" if not config.looks and not config.active
                   else f"its looks (undecided at {config.seeds_looked} seeds)"]
    return {"failed": tuple(failed), "missing": tuple(missing)}

"""Where a sweep's verdict is decided, for every design: the locked rule over the comparison stage.

    verdict(locked, configs, sweep_dir)   the report's verdict: `decide` for a fixed design, the
                                          looks (`sequential_verdict`) for a sequential one

A fixed design (`decide`): the configurations in the rule's order (`smallest|largest AXIS`: the
axis's values, numerically where they are numbers, an interpolated configuration right after its
parent's; `first config`: the plan's order, the interpolated ones last); each is held to every
condition of the rule on its statistics over all its seeds (at the end, or at the common step when
the rule says so); the first that passes every condition is the choice. One configuration alone
(`--env-file --seeds`) has nothing to choose among: its verdict says whether it holds. The verdict
also says what more seeds could settle (`would_change`).

A sequential design (`sequential_verdict`): the schedule (judge/schedule.py) from the looks log,
whose every look the report has just recomputed from the run dirs (judge/looks_check.py): the rule's
order is the schedule's (a fixed sequence over an axis, or `first config`), a configuration's
conditions are decided by its looks (and the end criteria once they pass), and once the schedule
says the rule is decided the choice is the fixed design's rule over those checks (`choose`: the
schedule plans looks and seeds, it chooses nothing). Its sentence states the design's error guarantee beside the false pass measured at few
seeds (measured_false_pass.txt, the bench's own lines); "more seeds would ..." is no advice a locked
sequential design can take (max_seeds is in the plan's hash).

Every piece of a verdict's text is here too: the one-configuration line, the sequential clause and
sentence (the coordinator's log, `tatu sweep status`), the runs spent."""
from __future__ import annotations

import collections
import math
import re
from functools import cache
from pathlib import Path
from typing import Callable

from tatu.evals.seeds import power as seeds_power
from tatu.evals.seeds.guarantee import skew_note
from tatu.evals.seeds.sequential import Design
from tatu.sweep.judge import looks_log
from tatu.sweep.judge.common_step import COMMON_LINES
from tatu.sweep.judge.looks_log import LoggedLook
from tatu.sweep.judge.looks_text import configurations, looks_lines, upper_bound
from tatu.sweep.judge.outcome import TERMINAL
from tatu.sweep.judge.records import ConfigResult, FailedCondition, RuleCheck, SweepVerdict
from tatu.sweep.judge.schedule import ConfigSchedule, Schedule, grouped_members, schedule
from tatu.sweep.judge.stats import paired_stats
from tatu.sweep.plan.load import Plan
from tatu.sweep.plan.lock import LockedPlan
from tatu.sweep.plan.rule import CONFIG, EXACT_METRIC, Rule, held_out_set

MEASURED = Path(__file__).with_name("measured_false_pass.txt")


def verdict(locked: LockedPlan, configs: list[ConfigResult], sweep_dir: Path) -> SweepVerdict:
    """The report's verdict over the comparison stage's configurations (with their paired statistics)."""
    if locked.plan.design is None:
        return decide(locked.plan, configs, complete=all(r.state in TERMINAL for c in configs for r in c.results))
    return sequential_verdict(locked, configs, sweep_dir)


# --- a fixed design: every configuration on all its seeds ---------------------------------------------

def decide(plan: Plan, configs: list[ConfigResult], complete: bool = False) -> SweepVerdict:
    """The plan's rule over the configurations; `complete`: every member has finished (else the
    verdict is provisional)."""
    rule = plan.rule
    ordered = judged_order(plan, configs)
    labels = _labels(rule, ordered)
    checks = [condition_check(rule, config, labels[config.key]) for config in ordered]
    chosen = choose(checks)
    if rule.axis == CONFIG and len(checks) == 1:  # one configuration (--env-file --seeds): nothing to choose among
        line = one_config_line(rule, checks[0], sum(r.has("end") for r in ordered[0].results))
    elif chosen:
        line = f"{rule.axis}={chosen.label}: the {rule.choose} {rule.axis} such that {_conditions(rule)}"
    else:
        line = f"no {rule.axis} satisfies the rule ({rule.text})"
    return SweepVerdict(rule=rule.text, axis=rule.axis, at=rule.at, at_step=_at_step(rule, configs), at_tokens=_at_tokens(rule, configs),
                        chosen=chosen and chosen.value, line=line, checks=tuple(checks),
                        would_change=tuple(_would_change(rule, ordered, checks, chosen)), complete=complete,
                        notes=skew_notes(rule, ordered, labels))


def choose(checks: list[RuleCheck]) -> RuleCheck | None:
    """Both designs' choice: the first configuration, in the rule's order (judged_order), that passes
    it. A fixed design's checks are its conditions at the judged step; a sequential design's are its
    looks' decisions (looks_check: a configuration passes when its looks and end criteria did), asked
    once the schedule says the rule is decided. For `smallest|largest AXIS` the first that passes in
    the rule's order is the last pass of the fixed sequence tested from the other end (judge/order.py:
    every value tested before the first failure passed, and none past it ran)."""
    return next((c for c in checks if c.passes), None)


def judged_order(plan: Plan, configs: list[ConfigResult]) -> list[ConfigResult]:
    """The configurations in the order the rule judges them."""
    return rule_order(plan, configs, lambda c: c.key, lambda c: c.values[plan.rule.axis])


def rule_order(plan: Plan, items: list, key_of: Callable, value_of: Callable) -> list:
    """`items` (configurations' results or their schedules) in the rule's order, by their key and their
    value of the rule's axis: `first config` the plan's order, else the axis's values from the one the
    rule chooses first (`smallest`: ascending)."""
    rule = plan.rule
    if rule.axis == CONFIG:  # `first config`: the plan's order of its configurations
        order = list(plan.configs) + plan.interpolated_keys()  # interpolated ones after the named
        return sorted(items, key=lambda c: order.index(value_of(c)))
    axis_values = plan.axes[rule.axis]
    # an interpolated configuration has its parent's value: judged after the parent's own (a stable sort)
    items = sorted(items, key=lambda c: key_of(c) in plan.interpolated_keys())
    return sorted(items, key=lambda c: float(value_of(c)) if _is_number(value_of(c))
                  else axis_values.index(value_of(c)), reverse=rule.choose == "largest")


def _labels(rule: Rule, ordered: list[ConfigResult]) -> dict[str, str]:
    """What the verdict names each configuration by: its value of the rule's axis; configurations
    crossed with axes share values of it, so a shared one is named with its key too."""
    shared = collections.Counter(config.values[rule.axis] for config in ordered)
    return {c.key: f"{c.values[rule.axis]} ({c.key})" if shared[c.values[rule.axis]] > 1 else c.values[rule.axis]
            for c in ordered}


def condition_check(rule: Rule, config: ConfigResult, label: str) -> RuleCheck:
    """One configuration held to every condition of the rule, on its metrics where the rule judges."""
    failed, missing = [], []
    for cond in rule.conditions:
        value = ((config.metrics_common if rule.at == "common" else config.metrics) or {}).get(cond.metric)
        if value is None:
            missing.append(cond.metric)
        elif not cond.holds(value, config.effective):
            failed.append(FailedCondition(cond.text(), value, cond.threshold(config.effective),
                                          _fmt_metric(cond.metric, value)))
    return RuleCheck(config.key, config.values[rule.axis], label, tuple(failed), tuple(missing),
                     any(r.interpolated for r in config.results))


def one_config_line(rule: Rule, check: RuleCheck, seeds: int) -> str:
    """The verdict of a rule over one configuration (nothing to choose among): `run5 holds across 3
    seeds: CONDITIONS`; `forgets` when a drift condition failed (the daemon's word for it), `does not
    hold` when only another one did, `is not judged` when a metric is missing."""
    conditions = _conditions(rule)
    if check.passes:
        return f"{check.label} holds across {seeds} seeds: {conditions}"
    if check.failed:
        drift = any(f.condition.split()[0].startswith(("drift", "every_eval_drift")) for f in check.failed)
        return f"{check.label} {'forgets' if drift else 'does not hold'} across {seeds} seeds (the rule: {conditions})"
    return f"{check.label} is not judged across {seeds} seeds: no value for {', '.join(check.missing)} ({conditions})"


def _conditions(rule: Rule) -> str:
    return rule.text.split("such that", 1)[1].strip()


def _at_step(rule: Rule, configs: list[ConfigResult]) -> int | None:
    """The common step the rule judged every configuration at; None at the end, or at equal SFT
    tokens, where each configuration has its own step."""
    if rule.at != "common" or _at_tokens(rule, configs) is not None:
        return None
    return next((c.common_step for c in configs), None)


def _at_tokens(rule: Rule, configs: list[ConfigResult]) -> int | None:
    """The SFT tokens every configuration was judged at where their steps train different amounts."""
    return next((c.common_tokens for c in configs if c.common_tokens is not None), None) if rule.at == "common" else None


def _fmt_metric(name: str, value: float) -> str:
    return f"{value:.0f}" if name == "aborted" else f"{value * 100:+.1f}%"


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _stats_key(base: str) -> str:
    """The set a condition's metric (without _hi/_lo) is measured on: drift, sftHeld or a held-out set."""
    return "drift" if base.startswith("drift") and not base.startswith("every") else (held_out_set(base) or "sftHeld")


def skew_notes(rule: Rule, ordered: list[ConfigResult], labels: dict[str, str]) -> tuple[str, ...]:
    """A line per configuration and set whose one-sided criterion (`_hi` / `_lo`) rests on per-line
    changes more skewed than the range the bounds were measured on (evals/seeds/guarantee.skew_note),
    in the rule's order: `config=b drift: its per-line changes are more skewed (skewness +6.1) ...`."""
    bases = dict.fromkeys(c.metric.removesuffix("_hi").removesuffix("_lo") for c in rule.conditions
                          if c.metric.endswith(("_hi", "_lo")) and not c.metric.startswith("every"))
    notes = []
    for config in ordered:
        stats = config.stats_at(rule.at == "common") or {}
        for key in dict.fromkeys(_stats_key(base) for base in bases):
            note = stats.get(key) and skew_note(stats[key].line_skew)
            if note:
                notes.append(f"{rule.axis}={labels[config.key]} {key}: {note}")
    return tuple(notes)


def _would_change(rule: Rule, ordered: list[ConfigResult], checks: list[RuleCheck], chosen: RuleCheck | None) -> list[str]:
    """What more seeds could settle: a condition failed by its CI bound while its point estimate
    passes, and the paired difference between the chosen value and its neighbour before it."""
    notes = []
    by_key = {c.key: c for c in ordered}
    for check in checks:
        if chosen is not None and check is chosen:
            break
        config = by_key[check.config]
        for fail in check.failed:
            metric = fail.condition.split()[0]
            if EXACT_METRIC.match(metric):
                continue  # answers right: no perplexity CI to project (sweep/judge/answers.py)
            base = metric.removesuffix("_hi").removesuffix("_lo")
            key = _stats_key(base)
            stats = (config.stats_at(rule.at == "common") or {}).get(key)
            if not stats or metric == base or base.startswith("every") or base == "aborted":
                continue
            point, parts = stats.change.value, stats.parts
            # On the log scale: the bound must move inside the threshold. The crossed CI's expected
            # half-width at n seeds (power 0.5: the estimate and the spread holding) must fall
            # under the margin; the shared lines' part of it does not shrink with the seeds.
            margin = abs(math.log1p(fail.threshold) - stats.log_mean) if fail.threshold > -1 else 0.0
            passes_point = (point < fail.threshold) if metric.endswith("_hi") else (point > fail.threshold)
            if passes_point and margin > 0 and parts is not None:
                need = seeds_power.seeds_needed(parts, margin, power=0.5)
                more = (f"about {max(1, need - stats.n_seeds)} more seeds would narrow {metric} enough to pass" if need
                        else f"no number of seeds would narrow {metric} enough to pass with these {parts.n_lines} lines "
                             "(more lines would)")
                notes.append(f"{rule.axis}={check.label}: its {base} point estimate {_fmt_metric(base, point)} passes; "
                             f"{more} (if the estimate and the spread hold)")
    if chosen is not None:
        # The chosen value against the one just before it (the cheaper dose it beat): is the
        # difference resolved across seeds, and if not, how many seeds would resolve it?
        position = [c.config for c in checks].index(chosen.config)
        if position > 0:
            before, this = by_key[checks[position - 1].config], by_key[chosen.config]
            lines = COMMON_LINES if rule.at == "common" else ("base", "end")
            p = paired_stats(this.results, before.results, "enRuler", None, 99, *lines)
            if p and p.p_value >= seeds_power.ALPHA:
                # the seeds whose crossed CI resolves the difference measured, at 80% power
                need = seeds_power.seeds_needed(p.parts, p.change.value)
                more = (f"{max(1, need - p.n_seeds)} more seeds would resolve it" if need
                        else f"no number of seeds would resolve it with these {p.parts.n_lines} lines (more lines would)")
                notes.append(f"{rule.axis}={checks[position - 1].label} vs {chosen.label}: drift difference "
                             f"not resolved (its 95% CI, seeds x lines, includes 0: p={p.p_value:.2f}); {more}")
    return notes


# --- a sequential design: the looks decide ------------------------------------------------------------

def sequential_verdict(locked: LockedPlan, configs: list[ConfigResult], sweep_dir: Path) -> SweepVerdict:
    """The verdict from the looks (the log, once judge/looks_check.py found it agrees with the run
    dirs): `chosen` is `choose` over the looks' checks once the schedule says the rule is decided (the
    fixed design's rule), `line` the verdict with its guarantee and the runs spent;
    `checks` (in the rule's order) each configuration's failed criteria as its looks and end criteria
    decided them (not judged: not run, or undecided); `looks` per configuration its decision and
    looks, a line each; `complete`: the looks decided the rule and every member the schedule let run
    has a result (the members it never needed are not missing results)."""
    plan, rule = locked.plan, locked.plan.rule
    runs = {m.run for ms in grouped_members(locked, plan.design).values() for m in ms}
    states = {r.member: r.state for c in configs for r in c.results if r.member in runs}  # a result is named by its run
    looked = schedule(locked, states, looks_log.read(sweep_dir), None)
    by_config = {c.config: c for c in looked.configs}
    ordered = judged_order(plan, configs)
    labels = _labels(rule, ordered)
    checks = tuple(looks_check(by_config[c.key], c.values[rule.axis], labels[c.key]) if c.key in by_config
                   else condition_check(rule, c, labels[c.key]) for c in ordered)
    chosen = choose(list(checks)) if looked.decided else None
    chosen = chosen and chosen.value
    return SweepVerdict(rule=rule.text, axis=rule.axis, at=rule.at, at_step=_at_step(rule, configs), at_tokens=_at_tokens(rule, configs), chosen=chosen,
                        line=f"{verdict_clause(looked, chosen, rule.text, rule.axis)}; {runs_line(looked, states)}",
                        checks=checks, would_change=(),
                        complete=looked.decided and all(states.get(run) in TERMINAL for run in looked.allowed),
                        looks=tuple(looks_lines(looked, states)), notes=skew_notes(rule, ordered, labels))


def looks_check(config: ConfigSchedule, value: str, label: str) -> RuleCheck:
    """A configuration held to the rule by its looks: a criterion its last look failed (or found
    futile), an end criterion that failed once its looks passed; not judged while its looks are
    undecided, never run, or cut short by a diverged member."""
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
    return RuleCheck(config.config, value, label, tuple(failed), tuple(missing), False)


def sequential_choice(plan: Plan, looked: Schedule) -> str | None:
    """The value a sequential design chose, from its schedule alone (`tatu sweep status`, the
    coordinator): `choose` over each configuration's looks in the rule's order; None before the
    schedule is decided (sequential_verdict asks the same of the run dirs' results)."""
    if not looked.decided:
        return None
    ordered = rule_order(plan, list(looked.configs), lambda c: c.config, lambda c: c.value)
    chosen = choose([looks_check(c, c.value, c.value) for c in ordered])
    return chosen and chosen.value


def runs_line(plan: Schedule, states: dict[str, str]) -> str:
    spent, fixed = plan.spent(states), plan.fixed_runs
    return (f"runs: {spent} of the fixed design's {fixed} ({plan.design.max_seeds} seeds x {len(plan.configs)} "
            f"configurations, {spent / fixed:.0%})" if fixed else "runs: none planned")


def verdict_clause(plan: Schedule, chosen: str | None, rule_text: str, axis: str) -> str:
    """`config=b (RULE); sequential obf, 3 to 5 seeds: ...the guarantee...` (or `no config satisfies
    ...`, `not decided yet: ...`): the verdict and its error guarantee, for status and the report."""
    design = plan.design
    guarantee = f"sequential {design.shape}, {design.min_seeds} to {design.max_seeds} seeds: {guarantee_clause(design)}"
    if design.pools_seed_variance:
        most = max((l.pooled_configs for c in plan.configs for l in c.looks), default=len(plan.configs))
        guarantee += (f", its looks' seed variance pooled across up to {configurations(most)}, which assumes every "
                      "configuration has the same seed variance")
    if not plan.decided:
        active = [f"{c.config} ({c.seeds_looked} seeds looked)" for c in plan.configs if c.active]
        return f"not decided yet: {', '.join(active) or 'nothing'} under test; {guarantee}"
    if chosen is None:
        return f"no {axis} satisfies the rule ({rule_text}); {guarantee}"
    return f"{axis}={chosen} ({rule_text}); {guarantee}"


def guarantee_clause(design: Design) -> str:
    """`a configuration at its threshold passes a criterion with probability 2.5% by design (2.4% measured
    at few seeds: COMMAND; docs/sweeps.md)`: the design's error rate as the plan line, `tatu sweep status`
    and the report state it, from the one record of it (MEASURED: the bench's own lines)."""
    measured = measured_false_pass(design.shape, design.pools_seed_variance)
    command = measured_command(design.shape, design.pools_seed_variance)
    return (f"a configuration at its threshold passes a criterion with probability {design.alpha / 2:.1%} by design "
            f"({measured:.1%} measured at few seeds{': ' + command if command else ''}; docs/sweeps.md)")


def verdict_sentence(locked_plan: Plan, plan: Schedule) -> str:
    rule = locked_plan.rule
    clause = verdict_clause(plan, sequential_choice(locked_plan, plan), rule.text, rule.axis)
    return f"verdict {clause}" if not plan.decided else f"verdict: {clause}"


# bench/sequential.py's line: `sequential obf[ pooled] scenario=at_threshold reps=N false_pass=X (mc_se Y) ...`
MEASURED_LINE = re.compile(r"^sequential (\w+)( pooled)? scenario=at_threshold reps=\d+ false_pass=([0-9.]+) ")


def measured_false_pass(shape: str, pooled: bool) -> float:
    """The false pass at the threshold the bench measured for this design (nan: never measured)."""
    return measured_rates(MEASURED).get((shape, pooled), math.nan)


def measured_command(shape: str, pooled: bool) -> str | None:
    """The bench command that measured it: the file's last `# nice ...` comment above its line."""
    return _measured(MEASURED)[1].get((shape, pooled))


def measured_rates(path: Path) -> dict[tuple[str, bool], float]:
    """(shape, pooled) -> false pass, from the bench's at_threshold lines (comments and others skipped)."""
    return _measured(path)[0]


@cache
def _measured(path: Path) -> tuple[dict[tuple[str, bool], float], dict[tuple[str, bool], str]]:
    """(shape, pooled) -> false pass, and -> the command of the comment above it."""
    found, commands, command = {}, {}, None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# nice "):
            command = line.removeprefix("# ")
        match = MEASURED_LINE.match(line)
        if match:
            found[match.group(1), bool(match.group(2))] = float(match.group(3))
            if command:
                commands[match.group(1), bool(match.group(2))] = command
    return found, commands

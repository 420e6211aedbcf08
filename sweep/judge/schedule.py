"""What a sequential sweep runs next, from the lock, the members' states and the looks log: the one
function every backend's coordinator calls (sweep/run/coordinator.py: foreground, systemd and Ray run
the same loop), and whose looks `tatu sweep report` recomputes (sweep/judge/looks_check.py).

Per configuration, its seeds run in the plan's seed order: the first min_seeds together, then one
at a time, each only after the look at the seeds before it said "continue". A configuration's
looks are every criterion's looks (sweep/judge/looks.config_looks) up to its decision: a
criterion that fails (or is futile) decides it, so do all criteria passed; looks past that seed
count are not the configuration's (the report recomputes the same cut, so the log and the files
agree). Once its looks pass, the rule's criteria a look does not decide are judged over the members
of the passing look (sweep/judge/end_criteria.py): one failing makes it a fail. Which
configurations are tested at all follows the rule:

    smallest|largest AXIS   a fixed sequence (sweep/judge/order.py): only the value under
                            test gets seeds; values past the first failure never run
    first config            the configurations in the plan's order, one at a time: the first
                            that passes is the choice, the ones after it never run (each at the
                            full alpha, as the fixed design's `first config` judges them)

A schedule is a pure function of the files: a coordinator killed at any moment and started again
computes the same looks and the same members, and logs only the looks not logged yet (the caller
appends `to_log` before it starts anything from `allowed`). A design that pools the seed variance
(min_seeds = 2) is one too, with the looks log among the files: a logged look is recomputed on the
members it logged as pooled (pool_source), and only a look not logged yet takes the other
configurations' members finished now; it was acted on by nobody before it is logged."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tatu.evals.seeds.sequential import Design
from tatu.sweep.plan.lock import LockedPlan
from tatu.sweep.plan.member import Member
from tatu.sweep.judge.records import MemberResult
from tatu.sweep.plan.rule import CONFIG, Condition, Rule, held_out_set, plan_error
from tatu.sweep.judge import looks_log
from tatu.sweep.plan.design import END_METRICS, criterion_set, rule_problem
from tatu.sweep.judge.end_criteria import EndFacts, EndFailure, end_failures, member_end_facts
from tatu.sweep.judge.looks_log import LoggedLook, check_logged, look_key
from tatu.sweep.judge.looks import PoolSource, config_looks
from tatu.sweep.judge.order import fixed_sequence, testing_order

FINISHED = ("done", "aborted")   # a member with a verdict: its per-line scores exist
STOPS = ("fail", "futility", "diverged")
UNDECIDED = ("waiting", "continue")
# a configuration's decision: waiting (fewer than min_seeds looked), continue, pass, fail, futility,
# diverged (a member of its first seeds has no result: no look can be made past it)


@dataclass(frozen=True)
class ConfigSchedule:
    """One configuration: its looks (logged or new), its decision, how many of its seeds may run."""

    config: str
    value: str                     # its value of the rule's axis (its name for `first config`)
    members: tuple[Member, ...]    # in the plan's seed order, at most max_seeds
    looks: tuple[LoggedLook, ...]
    decision: str
    active: bool                   # under test now: the rule's order reached it and it is undecided
    seeds_allowed: int             # of `members`, how many may start now (0 once inactive)
    end_failed: tuple[EndFailure, ...] = ()  # its looks passed, these end criteria failed (end_criteria.py)

    @property
    def seeds_looked(self) -> int:
        return max((l.look.n_seeds for l in self.looks), default=0)


@dataclass(frozen=True)
class Schedule:
    design: Design
    configs: tuple[ConfigSchedule, ...]
    to_log: tuple[LoggedLook, ...]   # looks the files allow that the log lacks: append before starting anything
    allowed: frozenset[str]          # member runs that may run (or keep running)
    decided: bool                    # the rule's verdict is decided: nothing new starts (the choice: judge/verdict.py)
    order: str                       # which order the rule's values are tested in, and why

    def spent(self, states: dict[str, str]) -> int:
        """Members that ran (have a result or are running): the runs the design spent."""
        return sum(states.get(m.run) in (*FINISHED, "diverged", "running") for c in self.configs for m in c.members)

    @property
    def fixed_runs(self) -> int:
        """What the fixed design would run: max_seeds for every configuration."""
        return self.design.max_seeds * len(self.configs)


def sequential_criteria(rule: Rule) -> tuple[Condition, ...]:
    """The rule's criteria judged at each look (METRIC_hi < VALUE); the others are judged at the end."""
    return tuple(c for c in rule.conditions if criterion_set(c) is not None)


def required_sets(rule: Rule) -> tuple[str, ...]:
    """The held-out sets the rule names (what member_result must score)."""
    return tuple(dict.fromkeys(n for n in (held_out_set(c.metric) for c in rule.conditions) if n))


def sft_half(locked: LockedPlan) -> str | None:
    """With a tune stage the comparison judges sftHeld on its judge half (tatu.sweep.plan.lock.SPLIT)."""
    return "judge" if locked.plan.tune_var else None


def grouped_members(locked: LockedPlan, design: Design) -> dict[str, list[Member]]:
    """The comparison members per configuration, in the plan's seed order, at most max_seeds each."""
    seeds = list(locked.plan.seeds)
    grouped: dict[str, list[Member]] = {}
    for member in locked.members_of("compare"):
        grouped.setdefault(member.config_key, []).append(member)
    return {key: sorted(group, key=lambda m: seeds.index(m.seed))[: design.max_seeds] for key, group in grouped.items()}


def cut_at_decision(criteria: tuple[Condition, ...], looks: list[LoggedLook]) -> tuple[list[LoggedLook], str]:
    """The configuration's looks up to its decision, and the decision: at each seed count, a criterion
    whose look fails (or is futile) decides it; all criteria passed (at that count or before) too."""
    by_n: dict[int, list[LoggedLook]] = {}
    for entry in looks:
        by_n.setdefault(entry.look.n_seeds, []).append(entry)
    latest: dict[str, str] = {}
    kept: list[LoggedLook] = []
    for n in sorted(by_n):
        kept += by_n[n]
        latest.update({e.criterion: e.look.decision for e in by_n[n]})
        stops = [latest[c.text()] for c in criteria if latest.get(c.text()) in STOPS]
        if stops:
            return kept, ("fail" if "fail" in stops else stops[0])
        if all(latest.get(c.text()) == "pass" for c in criteria):
            return kept, "pass"
    if len(latest) < len(criteria):
        return kept, "waiting"
    return kept, "continue"


def config_looks_all(design: Design, config: str, criteria: tuple[Condition, ...], effective: dict,
                     results: list[MemberResult], half: str | None,
                     pool_of: PoolSource | None = None) -> tuple[list[LoggedLook], str]:
    """Every look the files allow for one configuration, cut at its decision: the same for the
    scheduler and for the report's recomputation (sweep/judge/looks_check.py)."""
    looks = [entry for c in criteria for entry in config_looks(design, config, c, effective, results, half, pool_of)]
    return cut_at_decision(criteria, looks)


def pool_source(grouped: dict[str, list[Member]], config: str, logged: list[LoggedLook],
                finished: Callable[[Member], MemberResult | None]) -> PoolSource:
    """What each look of `config` pools, for a design that pools the seed variance. A look the log
    holds: the members it logged, each only while it is the next of its configuration in seed order,
    among its first n, and `finished` gives its result, so a logged member that is not
    drops out and the recomputed look disagrees with the log (65). A look not logged yet: every other
    configuration's first members, at most n, as far as they are all finished (a later seed that
    finished first waits for its turn, as in the configuration's own looks). `finished`: a member's
    result once it has its end scores, else None."""
    named = {(l.criterion, l.look.n_seeds): l.pooled for l in logged if l.config == config and l.pooled is not None}

    def leading(members: list[Member], names: list[str] | None) -> list[MemberResult]:
        out = []
        for position, member in enumerate(members):
            result = finished(member) if names is None or (position < len(names) and names[position] == member.run) else None
            if result is None:
                break
            out.append(result)
        return out

    def pool_of(criterion: str, n: int) -> list[tuple[str, list[MemberResult]]]:
        groups = named.get((criterion, n))
        if groups is None:
            return [(key, leading(members[:n], None)) for key, members in grouped.items() if key != config]
        return [(g.config, leading(grouped.get(g.config, [])[:n] if g.config != config else [], list(g.members)))
                for g in groups]

    return pool_of


def _finished_prefix(members: list[Member], states: dict[str, str]) -> tuple[int, bool]:
    """How many of the first members have a result, and whether the next one ended without one."""
    n = 0
    for member in members:
        state = states.get(member.run, "pending")
        if state not in FINISHED:
            return n, state == "diverged"
        n += 1
    return n, False


def schedule(locked: LockedPlan, states: dict[str, str], logged: list[LoggedLook],
             results_of: Callable[[Member], MemberResult] | None, log_path: Path | None = None,
             facts_of: Callable[[Member], EndFacts] | None = None) -> Schedule:
    """`states`: member run -> its state (sweep/run/members.py); `logged`: the looks log; `results_of`:
    a member's result with its per-line scores (sweep/judge/analysis.member_result), asked only for the
    members of a configuration with a seed not looked at yet (None: the log alone, as `tatu sweep
    status` reads it, computing nothing). A logged look the files recompute
    otherwise is 65 (check_logged, naming `log_path`'s line): a decision nobody can reproduce is not
    acted on. `facts_of`: what the end criteria read of a member (default: its run dir's evals and verdict).
    A configuration whose looks pass is a fail when an end criterion fails over the members of its
    passing look."""
    design, rule = locked.plan.design, locked.plan.rule
    problem = rule_problem(rule)
    if problem:  # refused when the plan was loaded; a lock edited by hand still cannot be looked at
        raise plan_error(locked.plan.path, "[design] sequential", problem)
    criteria = sequential_criteria(rule)
    path = log_path or Path(looks_log.FILE)
    grouped = grouped_members(locked, design)
    to_log: list[LoggedLook] = []
    decisions: dict[str, tuple[list[LoggedLook], str, tuple[EndFailure, ...]]] = {}
    end_conditions = tuple(c for c in rule.conditions if c.metric in END_METRICS)
    for key, members in grouped.items():
        mine = [l for l in logged if l.config == key]
        kept, decision = cut_at_decision(criteria, mine)
        prefix, diverged = _finished_prefix(members, states)
        looked = max((l.look.n_seeds for l in mine), default=0)
        if results_of is not None and decision in UNDECIDED and prefix >= design.min_seeds and prefix > looked:
            # a seed finished since the last logged look: recompute the configuration's looks
            results = [results_of(m) for m in members[:prefix]]
            pool_of = pool_source(grouped, key, mine, _finished_result(states, results_of))
            kept, decision = config_looks_all(design, key, criteria, locked.effective_config(members[0].run), results,
                                              sft_half(locked), pool_of)
            check_logged(path, logged, kept)  # what was logged (and acted on) is what the files say
            known = {look_key(l) for l in mine}
            to_log += [l for l in kept if look_key(l) not in known]
        if decision in UNDECIDED and diverged:
            decision = "diverged"
        failed: tuple[EndFailure, ...] = ()
        if decision == "pass" and end_conditions:
            looked_on = members[:max(l.look.n_seeds for l in kept)]
            read = facts_of or (lambda member: member_end_facts(member.run_dir))
            failed = end_failures(end_conditions, locked.effective_config(members[0].run), [read(m) for m in looked_on])
            decision = "fail" if failed else decision
        decisions[key] = (kept, decision, failed)
    active, decided, order = _rule_order(rule, list(locked.plan.configs), grouped,
                                         {k: d for k, (_, d, _) in decisions.items()})
    configs, allowed = [], set()
    for key, members in grouped.items():
        kept, decision, failed = decisions[key]
        budget = _seeds_allowed(design, decision, kept) if key in active and not decided else 0
        for position, member in enumerate(members):
            # a member already running or finished stays: its result is kept (and looked at)
            if position < budget or states.get(member.run, "pending") != "pending":
                allowed.add(member.run)
        configs.append(ConfigSchedule(key, _value(rule, members[0]), tuple(members), tuple(kept), decision,
                                      key in active, budget, failed))
    return Schedule(design, tuple(configs), tuple(to_log), frozenset(allowed), decided, order)


def _finished_result(states: dict[str, str], results_of: Callable[[Member], MemberResult]
                     ) -> Callable[[Member], MemberResult | None]:
    """A member's result once it finished (asked of results_of only then: the scoring is not free)."""
    def finished(member: Member) -> MemberResult | None:
        if states.get(member.run, "pending") not in FINISHED:
            return None
        result = results_of(member)
        return result if result.has("end") else None

    return finished


def _seeds_allowed(design: Design, decision: str, looks: list[LoggedLook]) -> int:
    """Of a configuration under test, how many seeds may run: min_seeds before its first look, one
    more after each look that continues, none past its decision."""
    if decision == "waiting":
        return design.min_seeds
    if decision == "continue":
        return min(design.max_seeds, max(l.look.n_seeds for l in looks) + 1)
    return 0


def _value(rule: Rule, member: Member) -> str:
    return member.values.get(rule.axis, member.config_key)


def _rule_order(rule: Rule, named: list[str], grouped: dict[str, list[Member]], decision: dict[str, str]):
    """(configurations under test, the verdict is decided, the order in words): which configurations
    get seeds next. Which value is chosen once it is decided is the verdict's (judge/verdict.py
    sequential_choice, the fixed design's rule). `named`: the plan's configurations, in its order."""
    values: dict[str, list[str]] = {}
    for key, members in grouped.items():
        values.setdefault(_value(rule, members[0]), []).append(key)
    if rule.axis == CONFIG:
        order = [name for name in named if name in values] + [v for v in values if v not in named]
        for name in order:
            keys = values[name]
            if any(decision[k] == "pass" for k in keys):
                return set(), True, _FIRST_CONFIG
            if not all(decision[k] in STOPS for k in keys):
                return set(keys), False, _FIRST_CONFIG
        return set(), True, _FIRST_CONFIG
    sequence_order = testing_order(rule.choose, list(values))
    by_value = {}
    for value, keys in values.items():
        decided = [decision[k] for k in keys]
        by_value[value] = ("pass" if "pass" in decided and all(d not in UNDECIDED for d in decided)
                           else "fail" if all(d in STOPS for d in decided) else "continue")
    sequence = fixed_sequence(sequence_order, by_value)
    words = (f"fixed sequence over {rule.axis}: {', '.join(sequence_order)} (`{rule.choose}`: from the "
             f"{'largest' if rule.choose == 'smallest' else 'smallest'} value, the one presumed best, each at the full "
             "alpha; the values past the first failure are not run)")
    if sequence.decided:
        return set(), True, words
    return {k for k in values[sequence.active] if decision[k] in UNDECIDED}, False, words


_FIRST_CONFIG = ("the configurations in the plan's order, one at a time (`first config`: the first that passes is "
                 "the choice, the ones after it are not run; each at the full alpha, as the fixed design judges them)")

"""A plan's `[design]` section: a group-sequential design over seeds (evals/seeds/sequential.Design),

    [design]
    sequential = "obf"     # or "pocock": the Lan-DeMets spending shape
    min_seeds = 3          # the first look (default 3; 2 pools the seed variance across configurations)
    max_seeds = 6          # required: the most seeds any configuration gets

pre-registered: in the plan's hash and lock only when the plan has it (a plan without it hashes as
before), so an edit after the lock is a changed plan (78). The plan's `seeds` are the order seeds
run in, so they must list at least max_seeds, and the rule must have a criterion a look decides
(METRIC_hi < VALUE), judged at the end. Every problem is 78 naming the file and the key."""
from __future__ import annotations

from pathlib import Path

from tatu.evals.seeds.sequential import DEFAULT_MIN_SEEDS, Design
from tatu.sweep.plan.rule import Condition, Rule, held_out_set, plan_error

KEYS = ("max_seeds", "min_seeds", "sequential")
EXAMPLE = '[design] sequential = "obf", max_seeds = 6'
# The rule's criteria a look does not decide: judged once a configuration's looks pass (tatu.sweep.judge.end_criteria)
END_METRICS = ("every_eval_drift", "every_eval_drift_hi", "aborted")


def criterion_set(condition: Condition) -> str | None:
    """The eval set whose crossed CI a `_hi` criterion bounds (None: not judged sequentially)."""
    if not condition.metric.endswith("_hi") or condition.metric.startswith("every_eval"):
        return None
    base = condition.metric.removesuffix("_hi")
    return "enRuler" if base == "drift" else "sftHeld" if base == "sftHeld_change" else held_out_set(base)


def _count(section: dict, key: str, path: Path, default: int | None) -> int:
    value = section.get(key, default)
    if value is None:
        raise plan_error(path, f"[design] {key}", f"missing: a sequential plan says the most seeds it may run, e.g. {EXAMPLE}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise plan_error(path, f"[design] {key}", f"{value!r} is not a whole number of seeds")
    return value


def rule_problem(rule: Rule) -> str | None:
    """Why the locked rule cannot be looked at as seeds finish (None if it can)."""
    if rule.at == "common":
        return ("the rule is judged at the common step, a look judges each member's end: a sequential rule is judged "
                "at the end")
    if not any(criterion_set(c) for c in rule.conditions):
        return (f"the rule ({rule.text}) has no criterion a look can decide: one METRIC_hi < VALUE at least "
                "(e.g. drift_hi < MIX_FORGET_LIMIT)")
    other = [c.metric for c in rule.conditions if criterion_set(c) is None and c.metric not in END_METRICS]
    if other:
        return (f"{other[0]}: a look decides METRIC_hi < VALUE, and {', '.join(END_METRICS)} are judged when the "
                "looks pass; a point estimate or a lower bound has no sequential test here")
    return None


def read_design(section: dict | None, path: Path, seeds: list[int], rule: Rule | None = None) -> Design | None:
    if section is None:
        return None
    unknown = sorted(set(section) - set(KEYS))
    if unknown:
        raise plan_error(path, f"[design] {unknown[0]}", f"unknown key (known: {', '.join(KEYS)})")
    shape = section.get("sequential")
    if not isinstance(shape, str):
        raise plan_error(path, "[design] sequential", f"missing or not a string: e.g. {EXAMPLE}")
    design = Design(shape, _count(section, "min_seeds", path, DEFAULT_MIN_SEEDS), _count(section, "max_seeds", path, None))
    problem = design.problem()
    if problem:
        key = problem.split(" ", 1)[0]
        raise plan_error(path, f"[design] {key if key in KEYS else 'sequential'}", problem)
    problem = rule and rule_problem(rule)
    if problem:
        raise plan_error(path, "[design] sequential", problem)
    if len(seeds) < design.max_seeds:
        raise plan_error(path, "seeds", f"{len(seeds)} seeds for max_seeds = {design.max_seeds}: list the seeds in the "
                                        "order they run, at least max_seeds of them")
    return design


def design_from_json(doc: dict | None) -> Design | None:
    return None if not doc else Design.from_json(doc)

"""A sweep's decision rule, written before the results: `smallest|largest AXIS such that
METRIC < VALUE and ...` (or `first config such that ...`: the named configurations in the plan's
order), parsed once, judged by the analysis on every configuration."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tatu.exitcodes import BAD_CONFIG
from tatu.formats import eval_name_problem
from tatu.names import nearest
from tatu.sweep.errors import SweepError

METRICS = ("drift", "drift_lo", "drift_hi", "sftHeld_change", "sftHeld_change_lo", "sftHeld_change_hi",
           "every_eval_drift", "every_eval_drift_hi", "aborted")
# An eval set's change vs step 0, named by its set: `ptVal_change_hi < MIX_FORGET_LIMIT` (the model's own
# language held), `ptNews_change_hi < 0.05` (any held-out set; tatu.formats' set names). sftHeld's is
# sftHeld_change (METRICS) and enRuler's is drift.
HELD_OUT_METRIC = re.compile(r"^([A-Za-z][A-Za-z0-9]*)_change(_lo|_hi)?$")
# A set's change in answers right vs step 0 (exact match, SET_exact: docs/metrics.md), over seeds x
# pairs: `sftHeld_exact_change_lo > 0` (more answers right, its CI above zero). A set without answers
# leaves it unvalued: the configuration is not judged, never passed on a 0.
EXACT_METRIC = re.compile(r"^([A-Za-z][A-Za-z0-9]*)_exact_change(_lo|_hi)?$")
# "... such that CONDITIONS [at the end | at the common step]": which comparison the rule judges
# (default the end; the common step is the last eval step every member reached).
RULE = re.compile(r"^\s*(smallest|largest|first)\s+([A-Z][A-Z0-9_]*|config|alpha)\s+such\s+that\s+(.+?)"
                  r"(?:\s+at\s+the\s+(end|common\s+step))?\s*$")
# The key naming a member's configuration (`[configs]`) in its values, the baseline and the rule:
# lowercase, so it can never be a run variable.
CONFIG = "config"
# `tatu interpolate --pick`'s axis: the interpolation's alphas (lowercase too: never a run variable)
ALPHA = "alpha"
CONDITION = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*(<=|<|>=|>)\s*([A-Z][A-Z0-9_]*|[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?%?)\s*$")


def plan_error(path: Path, where: str, message: str) -> SweepError:
    """Every problem with a plan: exit 78, naming the file and the key."""
    return SweepError(BAD_CONFIG, f"{path}: {where}: {message}")


@dataclass(frozen=True)
class Condition:
    metric: str
    op: str
    value: str  # a number ("0", "5%") or a run variable (MIX_FORGET_LIMIT), resolved per configuration

    def threshold(self, config: dict) -> float:
        if self.value[0].isalpha():
            return float(config[self.value])
        return float(self.value[:-1]) / 100 if self.value.endswith("%") else float(self.value)

    def holds(self, measured: float, config: dict) -> bool:
        limit = self.threshold(config)
        return {"<": measured < limit, "<=": measured <= limit, ">": measured > limit, ">=": measured >= limit}[self.op]

    def text(self) -> str:
        return f"{self.metric} {self.op} {self.value}"


@dataclass(frozen=True)
class Rule:
    text: str
    choose: str  # smallest | largest (an axis's values) | first (the configurations in the plan's order)
    axis: str    # an axis, or CONFIG
    conditions: tuple[Condition, ...]
    at: str = "end"  # "end" (each member's last step) | "common" (the last eval step every member reached)


# The roles whose change has a name of its own in METRICS: a `<SET>_change` of theirs is that name.
OWN_NAMES = {"sftHeld": "sftHeld_change", "enRuler": "drift"}


def held_out_set(metric: str) -> str | None:
    """The eval set a `<SET>_change[_lo|_hi]` metric names beyond sftHeld and enRuler (None if none):
    ptVal (the model's own language: protected like any held-out set) or a held-out set of the data.
    sftHeld's and enRuler's changes are METRICS of their own: sftHeld_change and drift."""
    match = HELD_OUT_METRIC.match(metric)
    if match is None or match.group(1) in (*OWN_NAMES, "drift") or eval_name_problem(match.group(1)):
        return None
    return match.group(1)


def named_sets(rule: Rule) -> tuple[str, ...]:
    """Every eval set the rule names by itself (SET_change, SET_exact_change), in the rule's order:
    what the members' data must hold (tatu.sweep.plan.data_check)."""
    named = []
    for condition in rule.conditions:
        exact = EXACT_METRIC.match(condition.metric)
        named.append(exact.group(1) if exact else held_out_set(condition.metric))
    return tuple(dict.fromkeys(n for n in named if n))


def parse_rule(text: str, axes: dict, path: Path, configs=(), where: str = "[decision] rule") -> Rule:
    """`configs`: the names of the plan's configurations (what `first config` chooses among);
    `where`: what the errors name after the path (a plan's key, or `tatu interpolate --pick`'s flag)."""
    from tatu.daemon.config import known_variables

    match = RULE.match(text)
    if not match:
        raise plan_error(path, where, f"{text!r} is not 'smallest|largest AXIS such that METRIC < VALUE and ... "
                                      f"[at the end | at the common step]' (or 'first config such that ...')")
    choose, axis, rest, at = match.groups()
    if (choose == "first") != (axis == CONFIG):
        raise plan_error(path, where, f"'{choose} {axis}': write 'smallest|largest AXIS' or 'first config'")
    if axis == CONFIG and not configs:
        raise plan_error(path, where, "'first config' chooses among [configs], and the plan has none")
    if axis != CONFIG and axis not in axes:
        also = " or 'first config'" if configs else ""
        meant = nearest(axis, list(axes))
        raise plan_error(path, where, f"{axis} is not an axis of the plan" + (f" (did you mean {meant}?)" if meant else "")
                         + f" (axes: {', '.join(axes) or 'none'}){also}")
    conditions = []
    for part in re.split(r"\s+and\s+", rest):
        cond = CONDITION.match(part)
        if not cond:
            raise plan_error(path, where, f"condition {part.strip()!r} is not 'METRIC < VALUE' "
                                          "(or 'SET_exact_change_lo > VALUE')")
        metric, op, value = cond.groups()
        own = HELD_OUT_METRIC.match(metric)
        if own and own.group(1) in OWN_NAMES and metric not in METRICS:
            named = OWN_NAMES[own.group(1)] + (own.group(2) or "")
            raise plan_error(path, where, f"unknown metric {metric!r}: {own.group(1)}'s change is {named}")
        if metric not in METRICS and held_out_set(metric) is None and not EXACT_METRIC.match(metric):
            meant = nearest(metric, METRICS)
            raise plan_error(path, where, f"unknown metric {metric!r}" + (f" (did you mean {meant}?)" if meant else "")
                                          + f" (known: {', '.join(METRICS)}, "
                                          "or SET_change[_lo|_hi] of ptVal or a held-out set of the data dir; "
                                          "or SET_exact_change[_lo|_hi]: a set's change in answers right)")
        if op.startswith(">") and not EXACT_METRIC.match(metric):
            raise plan_error(path, where, f"condition {part.strip()!r}: '>' bounds a change in answers right "
                                          "(SET_exact_change[_lo|_hi]); bound the others from above with '<'")
        if value[0].isalpha() and value not in known_variables():
            meant = nearest(value, known_variables())
            raise plan_error(path, where, f"{value} is neither a number nor a run variable"
                             + (f" (did you mean {meant}?)" if meant else ""))
        conditions.append(Condition(metric, op, value))
    return Rule(text.strip(), choose, axis, tuple(conditions), "common" if at and at.startswith("common") else "end")

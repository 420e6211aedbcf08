"""One rule chooses for both designs (issue 48 item 4): a sequential design's choice is verdict.choose
over its configurations' looks in the rule's order, as a fixed design's is over its conditions; the
schedule chooses nothing. For `smallest|largest AXIS` that is the last pass of the fixed sequence
tested from the other end (judge/order.py), checked here over every sequence of decisions."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

from tatu.evals.seeds.sequential import Design
from tatu.sweep.judge.end_criteria import EndFailure
from tatu.sweep.judge.order import fixed_sequence, testing_order as order_of
from tatu.sweep.judge.schedule import ConfigSchedule, Schedule
from tatu.sweep.judge.verdict import sequential_choice
from tatu.sweep.plan.rule import CONFIG

FAILED = (EndFailure("drift_hi < 5%", 0.07, 0.05, "+7.0%"),)


def _plan(axis: str, choose: str, configs: list[str], values: list[str]) -> SimpleNamespace:
    return SimpleNamespace(rule=SimpleNamespace(axis=axis, choose=choose), configs=configs,
                           axes={axis: values}, interpolated_keys=lambda: [])


def _config(key: str, value: str, decision: str) -> ConfigSchedule:
    return ConfigSchedule(key, value, (), (), decision, decision in ("waiting", "continue"), 0,
                          FAILED if decision in ("fail", "futility") else ())


def _as_run(order: tuple[str, ...], decisions: tuple[str, ...]) -> dict[str, str]:
    """The decisions a fixed sequence can reach: every value after the first that did not pass never ran."""
    out, stopped = {}, False
    for value, decision in zip(order, decisions):
        out[value] = "waiting" if stopped else decision
        stopped = stopped or decision != "pass"
    return out


def test_the_axis_choice_is_the_fixed_sequences_last_pass_for_every_sequence_of_decisions():
    values = ["0", "2", "4", "6"]
    for choose in ("smallest", "largest"):
        plan, order = _plan("REPLAY_N", choose, [f"replay-n{v}" for v in values], values), order_of(choose, values)
        for decisions in itertools.product(("pass", "fail", "futility", "continue"), repeat=len(values)):
            reached = _as_run(order, decisions)
            sequence = fixed_sequence(order, {v: d for v, d in reached.items() if d != "waiting"})
            looked = Schedule(Design("obf", 3, 5), tuple(_config(f"replay-n{v}", v, reached[v]) for v in values),
                              (), frozenset(), sequence.decided, "")
            expected = sequence.chosen if sequence.decided else None
            assert sequential_choice(plan, looked) == expected, (choose, reached)


def test_first_config_chooses_the_first_in_the_plans_order_that_passed():
    plan = _plan(CONFIG, "first", ["c", "a", "b"], [])
    looked = Schedule(Design("obf", 3, 5), (_config("a", "a", "pass"), _config("b", "b", "pass"), _config("c", "c", "fail")),
                      (), frozenset(), True, "")
    assert sequential_choice(plan, looked) == "a"  # c failed first; a precedes b in the plan's order
    assert sequential_choice(plan, Schedule(looked.design, looked.configs, (), frozenset(), False, "")) is None

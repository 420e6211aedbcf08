"""sweep/judge/order.py: fixed-sequence testing of an ordered axis, on hand-made decisions,
and its family-wise error by simulation (each dose's test at full alpha; doses past a failure never run)."""
from __future__ import annotations

import numpy as np

from tatu.sweep.judge.order import fixed_sequence, testing_order as order_of


def test_smallest_is_tested_from_the_largest_down():
    assert order_of("smallest", ["0", "2", "6", "10"]) == ("10", "6", "2", "0")
    assert order_of("largest", ["6", "0", "2"]) == ("0", "2", "6")


def test_the_first_failure_stops_the_sequence():
    order = ("10", "6", "2", "0")
    assert fixed_sequence(order, {}).active == "10"
    now = fixed_sequence(order, {"10": "pass", "6": "continue"})
    assert (now.active, now.chosen, now.decided) == ("6", "10", False)
    done = fixed_sequence(order, {"10": "pass", "6": "pass", "2": "fail"})
    assert (done.chosen, done.stopped_at, done.not_run, done.decided) == ("6", "2", ("0",), True)
    assert fixed_sequence(order, {"10": "futility"}).chosen is None
    every = fixed_sequence(order, dict.fromkeys(order, "pass"))
    assert every.decided and every.chosen == "0"


def test_family_wise_error_is_alpha():
    """Doses 10, 6 truly enough, 2 and 0 not (at the threshold): each test passes a true dose with
    power 0.8 and a false one with alpha 0.025; a wrong choice (2 or 0) within alpha + 3 MC SEs."""
    rng = np.random.default_rng(5)
    order, truth, n = ("10", "6", "2", "0"), {"10": True, "6": True, "2": False, "0": False}, 40_000
    wrong = 0
    for draws in rng.random((n, 4)):
        decisions = {v: "pass" if d < (0.8 if truth[v] else 0.025) else "fail" for v, d in zip(order, draws)}
        chosen = fixed_sequence(order, decisions).chosen
        wrong += chosen is not None and not truth[chosen]
    assert wrong / n <= 0.025 + 3 * np.sqrt(0.025 * 0.975 / n)
    assert wrong / n > 0.01  # it is spent, not wasted: the false dose is reached 64% of the time

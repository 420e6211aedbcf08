"""sweep/judge/looks.config_looks on member results with simulated per-line scores: each look
is the crossed CI of the first n members, looks stop at the first decision, a member not yet
finished holds back the later ones, and the same files give the same looks (what the report's
recomputation relies on)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from run_records import member_result
from tatu.evals.seeds import stats as st
from tatu.evals.seeds.sequential import Design
from tatu.sweep.judge.records import MemberResult
from tatu.sweep.plan.rule import Condition
from tatu.sweep.judge.looks import config_looks

DESIGN = Design("obf", 3, 6)
LIMIT = Condition("drift_hi", "<", "5%")
N_LINES = 40


def _results(drift: float, seeds: int, rng) -> list[MemberResult]:
    """Members whose enRuler per-line log change is log1p(drift) + seed + line + noise (tokens 10 a line)."""
    line = rng.normal(0, 0.002, N_LINES)
    out = []
    for s in range(1, seeds + 1):
        change = math.log1p(drift) + rng.normal(0, 0.01) + line + rng.normal(0, 0.01, N_LINES)
        base = rng.uniform(2.0, 3.0, N_LINES)
        scores = lambda nll: {"enRuler": {"nll_sum": (nll * 10).tolist(), "line_tokens": [10] * N_LINES,
                                          "line_index": list(range(N_LINES))}}
        out.append(dataclasses.replace(member_result("c", s, scores(base), scores(base + change)), steps=24))
    return out


def test_looks_stop_at_the_first_decision_and_are_reproducible():
    results = _results(-0.05, 6, np.random.default_rng(1))  # far under the 5% limit: passes early
    looks = config_looks(DESIGN, "c", LIMIT, {}, results)
    assert [l.look.decision for l in looks][-1] == "pass"
    assert all(l.look.decision == "continue" for l in looks[:-1])
    assert len(looks) < 4  # decided before max_seeds
    assert looks[0].members == ("c-s1", "c-s2", "c-s3")
    again = config_looks(DESIGN, "c", LIMIT, {}, results)
    assert again == looks
    # the look is evals' look on the crossed CI of those members, nothing else
    first = looks[0]
    runs = [st.RunLines(np.asarray(r.lines["base"]["enRuler"]["nll_sum"]), np.full(N_LINES, 10.0),
                        np.asarray(r.lines["end"]["enRuler"]["nll_sum"]), np.full(N_LINES, 10.0)) for r in results[:3]]
    ci = st.crossed_ci(runs, n_resamples=2000, seed=[3, 0])  # another resampling seed: close, not equal
    assert first.look.mean == pytest.approx(ci.mean, abs=1e-12)
    assert first.look.threshold == pytest.approx(math.log1p(0.05))


def test_an_unfinished_member_holds_back_the_later_ones():
    results = _results(0.049, 6, np.random.default_rng(2))  # at the limit: no early decision
    results[3] = dataclasses.replace(results[3], lines={})
    looks = config_looks(DESIGN, "c", LIMIT, {}, results)
    assert [l.look.n_seeds for l in looks] == [3]


def test_only_upper_bound_criteria_are_sequential():
    with pytest.raises(ValueError, match="not judged sequentially"):
        config_looks(DESIGN, "c", Condition("every_eval_drift_hi", "<", "5%"), {}, [])

"""evals/seeds/guarantee.py: the measured levels the plan and status lines quote are within the goal
they are quoted for (2.5% + 2 Monte-Carlo SEs), each names the bench command that measured it, and
the skew note appears exactly outside the simulated range."""
from __future__ import annotations

import pytest

from tatu.evals.seeds import guarantee
from tatu.evals.seeds.spending import SHAPES


@pytest.mark.parametrize("pooled", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_design_has_a_measured_level_within_the_goal(shape, pooled):
    got = guarantee.measured_level(shape, pooled)
    assert 0.0 < got.false_pass <= 0.025 + 2 * got.mc_se, got
    assert got.command.startswith("nice -n 10 .venv/bin/python bench/sequential.py"), got
    assert ("--min-seeds 2" in got.command) == pooled
    clause = guarantee.level_clause(shape, pooled)
    assert clause.startswith("a configuration at its threshold passes a criterion with probability 2.5% by design")
    assert f"at most {got.false_pass:.1%} measured" in clause and got.command in clause


def test_the_skew_note_is_said_only_outside_the_simulated_range():
    assert guarantee.skew_note(0.0) is None
    assert guarantee.skew_note(guarantee.SIMULATED_LINE_SKEW) is None
    assert guarantee.skew_note(-guarantee.SIMULATED_LINE_SKEW) is None
    note = guarantee.skew_note(7.3)
    assert note is not None and "skewness +7.3" in note and "docs/sweeps.md" in note
    assert guarantee.skew_note(-8.0) is not None  # a long left tail is outside it too

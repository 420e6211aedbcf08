"""The measured levels the plan, status and report lines quote (sweep/judge/verdict.guarantee_clause, read
from the bench's recorded lines) are within the goal they are quoted for (2.5% + 2 Monte-Carlo SEs),
each naming the bench command that measured it; and evals/seeds/guarantee.py's skew note appears
exactly outside the simulated range."""
from __future__ import annotations

import re

import pytest

from tatu.evals.seeds import guarantee
from tatu.evals.seeds.sequential import Design
from tatu.evals.seeds.spending import SHAPES
from tatu.sweep.judge import verdict


def _recorded(shape: str, pooled: bool) -> tuple[float, float, str]:
    """(false pass, its MC SE, the command above it), read here from the file's text on its own."""
    command, found = None, None
    for line in verdict.MEASURED.read_text().splitlines():
        if line.startswith("# nice "):
            command = line[2:]
        label = f"sequential {shape}{' pooled' if pooled else ''} scenario=at_threshold "
        if line.startswith(label):
            rate, se = re.search(r"false_pass=([0-9.]+) \(mc_se ([0-9.]+)\)", line).groups()
            found = (float(rate), float(se), command)
    assert found is not None, (shape, pooled)
    return found


@pytest.mark.parametrize("pooled", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_design_has_a_measured_level_within_the_goal(shape, pooled):
    rate, mc_se, command = _recorded(shape, pooled)
    assert 0.0 < rate <= 0.025 + 2 * mc_se, (rate, mc_se)
    assert command.startswith("nice -n 10 .venv/bin/python bench/sequential.py")
    assert ("--min-seeds 2" in command) == pooled
    clause = verdict.guarantee_clause(Design(shape, 2 if pooled else 3, 6))
    assert clause == (f"a configuration at its threshold passes a criterion with probability 2.5% by design "
                      f"({rate:.1%} measured at few seeds: {command}; docs/sweeps.md)")


def test_the_skew_note_is_said_only_outside_the_simulated_range():
    assert guarantee.skew_note(0.0) is None
    assert guarantee.skew_note(guarantee.SIMULATED_LINE_SKEW) is None
    assert guarantee.skew_note(-guarantee.SIMULATED_LINE_SKEW) is None
    note = guarantee.skew_note(7.3)
    assert note is not None and "skewness +7.3" in note and "docs/sweeps.md" in note
    assert guarantee.skew_note(-8.0) is not None  # a long left tail is outside it too

"""`tatu sweep plan`'s line for a sequential design states the level the design reaches as measured,
with the bench command that measured it: the clause the verdict ends with (issue 45 item 3)."""
from __future__ import annotations

import pytest

from tatu.sweep.judge import verdict
from tatu.evals.seeds.sequential import Design
from tatu.sweep.report.status import plan_line


@pytest.mark.parametrize("design", [Design("obf", 3, 6), Design("pocock", 3, 10), Design("obf", 2, 5)])
def test_the_plan_line_states_the_measured_level_and_its_command(design):
    line = plan_line(design, 4)
    rate = verdict.measured_false_pass(design.shape, design.pools_seed_variance)
    command = verdict.measured_command(design.shape, design.pools_seed_variance)
    assert "passes a criterion with probability 2.5% by design" in line
    assert f"({rate:.1%} measured at few seeds: {command}; docs/sweeps.md)" in line
    assert line.count(verdict.guarantee_clause(design)) == 1  # the words the verdict ends with, once
    # the pooled design quotes its own (pooled) bench run
    assert ("--min-seeds 2" in line) == design.pools_seed_variance

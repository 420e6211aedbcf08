"""A configuration whose per-line changes are more skewed than the range the one-sided bounds were
measured on (evals/seeds/guarantee.py) gets a line beside its verdict saying so; a normal one gets none
(issue 45 item 3). The skewness it is judged by is checked against scipy's."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sp

from run_records import config_result, rule_plan

from tatu.evals.seeds import guarantee
from tatu.evals.seeds.stats import RunLines, crossed_ci, line_changes
from tatu.sweep.judge.records import ConfigStat, SweepVerdict
from tatu.sweep.judge.verdict import decide
from tatu.sweep.report.tables import verdict_lines

RULE = "first config such that drift_hi < MIX_FORGET_LIMIT and sftHeld_change_hi < 0"
N_LINES = 166


def _runs(change: np.ndarray) -> list[RunLines]:
    """One token a line, start scores 0: a run's log ratio is its mean per-line change."""
    zeros, ones = np.zeros(change.shape[1]), np.ones(change.shape[1])
    return [RunLines(zeros, ones, row, ones) for row in change]


def _changes(skewed: bool) -> np.ndarray:
    """3 seeds x 166 lines of drift changes: normal line effects, or the same with a handful of lines
    forgotten far more than the rest (a long right tail: skewness far past the simulated 4)."""
    rng = np.random.default_rng(45)
    lines = 0.01 * rng.standard_normal(N_LINES)
    if skewed:
        lines[:4] += 0.4
    return 0.02 + lines + 0.002 * rng.standard_normal((3, 1)) + 0.005 * rng.standard_normal((3, N_LINES))


def _config(key: str, skewed: bool):
    ci = crossed_ci(_runs(_changes(skewed)), n_resamples=400)
    stat = ConfigStat.of(ci, {}, ())
    return ci, config_result(key, {"config": key}, (), metrics={"drift_hi": ci.hi, "sftHeld_change_hi": -0.1},
                             stats={"drift": stat, "sftHeld": None})


@pytest.mark.parametrize("skewed", [False, True])
def test_the_line_skew_is_scipys_unbiased_skewness_of_the_per_line_changes(skewed):
    ci, _ = _config("a", skewed)
    assert ci.line_skew == pytest.approx(sp.skew(line_changes(_runs(_changes(skewed))).mean(axis=0), bias=False), rel=1e-9)
    assert (abs(ci.line_skew) > guarantee.SIMULATED_LINE_SKEW) == skewed, ci.line_skew


def test_the_skew_note_stands_beside_the_skewed_configuration_alone(tmp_path):
    plan = rule_plan(RULE, {}, tmp_path / "p.toml", ("normal", "skewed"))
    (_, normal), (skewed_ci, skewed) = _config("normal", False), _config("skewed", True)
    verdict = decide(plan, [normal, skewed])
    note = f"config=skewed drift: {guarantee.skew_note(skewed_ci.line_skew)}"
    assert verdict.notes == (note,)
    assert f"  {note}" in verdict_lines(verdict, complete=True)
    # report.json keeps the note (not the skewness), and a verdict without notes writes no such key
    assert SweepVerdict.from_json(verdict.to_json()) == verdict
    assert decide(plan, [normal]).notes == () and "notes" not in decide(plan, [normal]).to_json()

"""The sequential design's goals (issues 35 and 45) on simulated crossed sweeps, judged by tatu's own
looks (evals/seeds/simulate.py), at fewer replicates than bench/sequential.py's: false pass at the
threshold <= 2.5% (the one-sided alpha it spends) + 2 MC SEs, for O'Brien-Fleming and Pocock alike,
while the naive rule (a look per seed on the plain 95% CI) exceeds it in the same test; the same
with the shared lines dominant and right-skewed, for the sequential and the fixed design; pass rate
at -1 seed SD within 3 points of the fixed design at max_seeds (the same simulated data); runs <=
65% of the fixed design in "mixed", <= 50% in "clear". The false-pass goal for min_seeds = 2 with
the seed variance pooled across six configurations (the naive rule on the pooled CI breaking it).
The simulated ANOVA parts against crossed_ci's on one data set: the last test."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tatu.evals.seeds import stats as seeds
from tatu.evals.seeds.sequential import Design
from tatu.evals.seeds.simulate import SCENARIOS, Effects, Scenario, Shape, anova_estimates, crossed_data, run_scenario

OBF = Design("obf", 3, 10)
POOLED = Design("obf", 2, 10)
NOMINAL = 0.025  # the one-sided alpha / 2 each criterion spends
# the threshold scenario with the shared lines' part of the mean half a seed's (5/6 of Var at 10
# seeds), their effects right-skewed (skewness 2): a few lines forgotten far more than the rest
SKEWED = Scenario("skewed_at_threshold", (0.0,) * 6, lines=0.5)
SKEWED_EFFECTS = Effects(line=Shape("gamma", 2.0))


def within_nominal(summary) -> bool:
    """The false pass at most 2.5% + 2 Monte-Carlo SEs of a 2.5% rate over the same configurations."""
    configurations = summary.reps * 6
    return summary.false_pass <= NOMINAL + 2 * math.sqrt(NOMINAL * (1 - NOMINAL) / configurations)


@pytest.mark.parametrize("shape", ["obf", "pocock"])
def test_false_pass_is_kept_and_the_naive_rule_breaks_it(shape):
    """Before issue 45: 3.7% (obf) and 4.3% (pocock) at 20,000 replicates."""
    design = Design(shape, 3, 10)
    ours = run_scenario(design, SCENARIOS["at_threshold"], 600, seed=11)
    print(f"{shape} at the threshold: {ours.false_pass:.4f} (mc_se {ours.false_pass_se:.4f})")
    assert within_nominal(ours), ours
    naive = run_scenario(design, SCENARIOS["at_threshold"], 300, seed=11, rule="naive")
    assert naive.false_pass > 0.05 + 2 * naive.false_pass_se  # looking at every seed without spending


@pytest.mark.parametrize("rule", ["sequential", "fixed"])
def test_false_pass_is_kept_when_skewed_lines_dominate(rule):
    """A symmetric interval around a right-skewed mean passed 4-6% here before issue 45."""
    got = run_scenario(OBF, SKEWED, 300, seed=15, rule=rule, effects=SKEWED_EFFECTS)
    print(f"{rule}, skewed lines dominant, at the threshold: {got.false_pass:.4f} (mc_se {got.false_pass_se:.4f})")
    assert within_nominal(got), got


def test_pooled_two_seed_looks_keep_the_false_pass_and_the_naive_rule_breaks_it():
    ours = run_scenario(POOLED, SCENARIOS["at_threshold"], 300, seed=14)
    naive = run_scenario(POOLED, SCENARIOS["at_threshold"], 300, seed=14, rule="naive")
    assert ours.false_pass <= 0.05 + 2 * ours.false_pass_se
    assert naive.false_pass > 0.05 + 2 * naive.false_pass_se


def test_power_at_minus_one_sd_is_the_fixed_designs():
    scenario = SCENARIOS["mixed"].__class__("minus1", (-1.0,) * 4)
    ours = run_scenario(OBF, scenario, 250, seed=12)
    fixed = run_scenario(OBF, scenario, 250, seed=12, rule="fixed")  # the same draws
    assert abs(ours.pass_at_minus1sd - fixed.pass_at_minus1sd) <= 0.03


@pytest.mark.parametrize("name,most", [("mixed", 0.65), ("clear", 0.50)])
def test_runs_against_the_fixed_design(name, most):
    assert run_scenario(OBF, SCENARIOS[name], 60, seed=13).runs_vs_fixed <= most


def test_simulated_parts_are_crossed_cis():
    """The ANOVA parts the simulation decides on, against crossed_ci on the same data as run lines
    (one token per line; start scores 0): mean exact, SE within the bootstrap's 10%."""
    rng = np.random.default_rng(3)
    y = crossed_data(rng, 1, 6, -1.0, 0.2, n_lines=60)[0]
    runs = [seeds.RunLines(np.zeros(60), np.ones(60), y[s], np.ones(60)) for s in range(6)]
    ci = seeds.crossed_ci(runs, n_resamples=4000)
    est = anova_estimates(y[None], 6)[0]
    assert est.mean == pytest.approx(ci.mean, abs=1e-9)
    assert est.se == pytest.approx(ci.se, rel=0.1)
    assert math.sqrt(est.parts.lines) == pytest.approx(ci.shared_line_se, rel=0.15)

"""evals/seeds/sequential.look: the decisions on hand-made estimates, the information fraction from
the crossed parts (the shared lines' part does not shrink), and the boundary the look records."""
from __future__ import annotations

import math

import pytest
from scipy import stats as sp

from tatu.evals.seeds.power import CrossedParts
from tatu.evals.seeds.sequential import Design, Estimate, Look, fractions, line_share, look
from tatu.evals.seeds.spending import spending_bounds

DESIGN = Design("obf", 3, 10)
SEEDY = CrossedParts(seed=0.7, interaction=0.3, lines=0.0, n_lines=100)  # no shared-line part


def test_fractions_count_the_lines_part():
    assert fractions(DESIGN, 0.0, 5) == pytest.approx((0.3, 0.4, 0.5))
    # lines half of Var(10): Var(S) = 0.5 * 10 / S + 0.5 (in Var(10) units)
    assert fractions(DESIGN, 0.5, 3)[0] == pytest.approx(1.0 / (0.5 * 10 / 3 + 0.5))
    lined = CrossedParts(seed=0.7, interaction=0.3, lines=0.1, n_lines=100)
    assert line_share(lined, 10) == pytest.approx(0.5)


def test_the_boundary_is_the_spending_one_on_the_t_scale():
    est = Estimate(5, -1.0, SEEDY)
    got = look(DESIGN, est, 0.0)
    z = spending_bounds("obf", (0.3, 0.4, 0.5), 0.025)[-1]
    assert got.z_bound == pytest.approx(z)
    assert got.t_bound == pytest.approx(sp.t.ppf(0.5 * math.erfc(-z / math.sqrt(2)), est.df))
    assert got.statistic == pytest.approx(1.0 / math.sqrt(1.0 / 5))


@pytest.mark.parametrize("mean,n,decision", [(-6.0, 6, "pass"), (6.0, 6, "fail"), (-0.5, 6, "continue"),
                                             (-0.5, 10, "fail"), (-2.0, 10, "pass")])
def test_decisions(mean, n, decision):
    assert look(DESIGN, Estimate(n, mean, SEEDY), 0.0).decision == decision


def test_lines_alone_make_a_pass_unreachable():
    """A mean just under the threshold with a big shared-line part: the last look says futility
    (more lines would), not fail; the first look is already near the last (its fraction ~ 1)."""
    lined = CrossedParts(seed=0.01, interaction=0.01, lines=1.0, n_lines=100)
    first = look(DESIGN, Estimate(3, -0.5, lined), 0.0)
    assert first.fraction > 0.95 and first.z_bound < 2.0  # nearly all the alpha at the first look
    final = look(DESIGN, Estimate(10, -0.5, lined), 0.0)
    assert final.decision == "futility"


def test_a_look_survives_json():
    got = look(DESIGN, Estimate(3, -0.2, SEEDY), 0.0)
    assert Look.from_json(got.to_json()) == got


def test_bad_designs_say_why():
    assert "unknown design" in Design("asha", 3, 10).problem()
    assert "min_seeds" in Design("obf", 1, 10).problem()
    assert Design("obf", 2, 10).problem() is None and Design("obf", 2, 10).pools_seed_variance  # pooled
    assert not Design("obf", 3, 10).pools_seed_variance
    assert "below min_seeds" in Design("obf", 5, 4).problem()
    assert Design("pocock", 3, 6).problem() is None


def test_a_configuration_clearly_over_its_threshold_fails_at_its_first_look():
    """A fail may stop on the fixed design's 95% CI (a non-binding stop never passes, so it cannot raise
    the false-pass rate): at 3 seeds, t_2 = 4.30, a mean 3 seed SDs over the threshold has its lower
    bound above it. The mirrored O'Brien-Fleming bound (t_2 at Phi(3.93): about 108) kept it going."""
    got = look(DESIGN, Estimate(3, 3.0, SEEDY), 0.0)
    assert got.decision == "fail"
    assert got.lower == pytest.approx(3.0 - sp.t.ppf(0.975, got.df) * math.sqrt(1.0 / 3.0))
    assert got.lower > 0.0
    assert look(DESIGN, Estimate(3, 2.0, SEEDY), 0.0).decision == "continue"  # lower bound below 0


def test_right_skewed_lines_raise_the_upper_bound_a_pass_needs():
    """The same look with the mean's third cumulant from right-skewed lines: the upper bound moves out
    (evals/seeds/skew.py), so a pass just inside the symmetric bound continues; left-skewed lines leave
    the upper bound where the t puts it (bounds move only outwards)."""
    lined = CrossedParts(seed=0.01, interaction=0.01, lines=1.0, n_lines=100)
    plain = look(DESIGN, Estimate(3, -2.2, lined), 0.0)
    assert plain.decision == "pass" and plain.upper < 0.0
    right = look(DESIGN, Estimate(3, -2.2, lined, third=0.35), 0.0)
    assert right.upper > plain.upper and right.decision != "pass"
    left = look(DESIGN, Estimate(3, -2.2, lined, third=-0.35), 0.0)
    assert left.upper == pytest.approx(plain.upper) and left.decision == "pass"


def test_a_look_logged_before_issue_45_still_reads():
    """A looks.jsonl line without ci_se, third and alpha reads with their defaults (a recomputation
    then tells it apart) rather than failing with a KeyError."""
    got = look(DESIGN, Estimate(5, -0.2, SEEDY, third=0.01), 0.0)
    doc = got.to_json()
    assert Look.from_json(doc) == got and doc["third"] == 0.01
    old = {k: v for k, v in doc.items() if k not in ("ci_se", "third", "alpha")}
    read = Look.from_json(old)
    assert math.isnan(read.ci_se) and read.third == 0.0 and read.decision == got.decision

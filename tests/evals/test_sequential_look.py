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

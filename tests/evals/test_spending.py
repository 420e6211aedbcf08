"""evals/seeds/spending.py against the published constants and two independent computations of the
same crossing probabilities: scipy's multivariate normal and a plain Monte-Carlo of Brownian motion."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp

from tatu.evals.seeds import spending

# Jennison & Turnbull (2000), tables 2.1 (Pocock) and 2.3 (O'Brien-Fleming): two-sided 0.05, K equal looks
POCOCK = {2: 2.178, 3: 2.289, 4: 2.361, 5: 2.413}
OBF = {2: 1.977, 3: 2.004, 4: 2.024, 5: 2.040}
# Lan-DeMets spending, 5 equal looks, one-sided 0.025 per side (the ldbounds / gsDesign examples)
LD_OBF = (4.8769, 3.3569, 2.6803, 2.2898, 2.0310)
LD_POCOCK = (2.4380, 2.4268, 2.4102, 2.3966, 2.3860)


@pytest.mark.parametrize("looks", sorted(POCOCK))
def test_classical_constants_match_the_tables(looks):
    assert spending.classical_constant("pocock", looks, 0.05) == pytest.approx(POCOCK[looks], abs=6e-4)
    assert spending.classical_constant("obf", looks, 0.05) == pytest.approx(OBF[looks], abs=6e-4)


def test_lan_demets_bounds_match_the_published_ones():
    fractions = [0.2, 0.4, 0.6, 0.8, 1.0]
    assert spending.spending_bounds("obf", fractions, 0.025) == pytest.approx(LD_OBF, abs=2e-4)
    assert spending.spending_bounds("pocock", fractions, 0.025) == pytest.approx(LD_POCOCK, abs=2e-4)


def test_spending_functions_end_at_alpha_and_grow():
    for shape in spending.SHAPES:
        values = [spending.spent(shape, t, 0.025) for t in np.linspace(0.05, 1.0, 20)]
        assert values[-1] == pytest.approx(0.025, abs=1e-12)
        assert all(b > a for a, b in zip(values, values[1:]))
    assert spending.spent("obf", 0.3, 0.025) < spending.spent("pocock", 0.3, 0.025)  # OBF spends little early


def _mvn_first_crossings(bounds, fractions):
    """P(first crossing at k) = P(Z_1..Z_{k-1} <= b) - P(Z_1..Z_k <= b), by scipy's multivariate normal."""
    t = np.asarray(fractions)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    below = [1.0] + [sp.multivariate_normal(np.zeros(k), cov[:k, :k]).cdf(np.asarray(bounds[:k]))
                     for k in range(1, len(t) + 1)]
    return [below[k] - below[k + 1] for k in range(len(t))]


def test_recursive_integration_agrees_with_scipy_multivariate_normal():
    fractions = [0.25, 0.45, 0.8, 1.0]  # unequal spacing: the correlations sqrt(t_j / t_k) matter
    bounds = [3.1, 2.6, 2.2, 2.0]
    ours = spending.crossing_probabilities(bounds, fractions)
    scipy_ = _mvn_first_crossings(bounds, fractions)
    assert ours == pytest.approx(scipy_, abs=2e-5)


def test_boundaries_spend_what_they_should_by_monte_carlo():
    """Brownian motion at the looks, counted: the crossing probability of the solved boundaries is
    alpha(t), within 4 Monte-Carlo SEs, both shapes."""
    rng = np.random.default_rng(7)
    fractions = np.array([0.3, 0.5, 0.7, 1.0])
    n = 400_000
    increments = rng.standard_normal((n, fractions.size)) * np.sqrt(np.diff(fractions, prepend=0.0))
    z = np.cumsum(increments, axis=1) / np.sqrt(fractions)
    for shape in spending.SHAPES:
        bounds = np.array(spending.spending_bounds(shape, fractions, 0.025))
        crossed = (z > bounds).any(axis=1).mean()
        assert abs(crossed - 0.025) < 4 * math.sqrt(0.025 * 0.975 / n), (shape, crossed)


def test_no_new_information_spends_nothing():
    bounds = spending.spending_bounds("obf", [0.5, 0.5, 1.0], 0.025)
    assert math.isinf(bounds[1])
    assert spending.spending_bounds("pocock", [1.0], 0.025)[0] == pytest.approx(1.95996, abs=1e-4)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="unknown spending shape"):
        spending.spending_bounds("haybittle", [1.0], 0.025)
    with pytest.raises(ValueError, match="non-decreasing"):
        spending.spending_bounds("obf", [0.6, 0.4, 1.0], 0.025)

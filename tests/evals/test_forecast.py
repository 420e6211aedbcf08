"""tatu.evals.forecast on synthetic rulers whose end is known.

A synthetic ruler: each line i has its own forgetting a_i (nats per token at the end, drawn around
a population mean MU) along a shape g(s) that grows with log s (the forecast's own family: these
tests are about its interval, the bench about the family), so the drift of English text at the last step is exactly exp(MU) - 1 while
the 166 lines the ruler happens to hold reach another value: the ruler's line sampling. A forecast
that ignores it is shown to miss that end far more often than 10% of the time.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from tatu.evals.forecast import Crossing, CurveFit, Forecast, ForecastError, Trajectory, fit, forecast

N_LINES = 166
END = 200
EVERY = 8


def shape(s) -> np.ndarray:
    """0 at step 4, 1 at the end, linear in log s (and 0 at the step-0 baseline)."""
    s = np.asarray(s, dtype=np.float64)
    return np.where(s > 0, 1 + np.log(np.maximum(s, 1) / END) / math.log(END / 4), 0.0)


def ruler(seed: int, mu: float, tau: float, noise: float = 0.01, steps=None) -> Trajectory:
    """Per-line NLL sums of a run whose line i forgets a_i ~ N(mu, tau) per token by the end, along shape()."""
    rng = np.random.default_rng(seed)
    steps = np.arange(0, END + 1, EVERY) if steps is None else np.asarray(steps)
    tokens = rng.integers(10, 60, N_LINES).astype(np.float64)
    base = rng.uniform(2.0, 4.0, N_LINES) * tokens
    a = rng.normal(mu, tau, N_LINES)
    nll = np.array([base + tokens * a * shape(s) + rng.normal(0, noise, N_LINES) * np.sqrt(tokens)
                    for s in steps])
    return Trajectory.of(steps, nll, tokens)


def first(trajectory: Trajectory, k: int) -> Trajectory:
    return Trajectory(trajectory.steps[:k], trajectory.nll[:k], trajectory.tokens)


def test_log_ratio_is_the_log_of_the_perplexity_ratio():
    """Independent of the module: ppl = exp(sum NLL / sum tokens) per eval, as evals/scoring.py defines it."""
    trajectory = ruler(0, 0.05, 0.1)
    ppl = [math.exp(row.sum() / trajectory.tokens.sum()) for row in trajectory.nll]
    expected = [math.log(p / ppl[0]) for p in ppl[1:]]
    assert trajectory.log_ratio() == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_line_bootstrap_matches_the_ratio_estimators_standard_error():
    """The line bootstrap's sd of y at one eval against the textbook (delta-method) SE of a ratio
    of sums, sqrt(sum (d_i - y T_i)^2) / sum T_i, computed here by hand."""
    trajectory = ruler(1, 0.05, 0.2)
    deltas = trajectory.nll[-1] - trajectory.nll[0]
    y = deltas.sum() / trajectory.tokens.sum()
    se = math.sqrt(((deltas - y * trajectory.tokens) ** 2).sum()) / trajectory.tokens.sum()
    reps = trajectory.resampled_log_ratio(np.random.default_rng(0), 4000)
    assert reps[:, -1].std(ddof=1) == pytest.approx(se, rel=0.08)
    assert reps[:, -1].mean() == pytest.approx(y, abs=se / 5)


def test_each_shape_is_a_least_squares_fit_and_the_point_their_mean():
    """Drift exactly on the log shape, every line alike: the log shape's fit is the curve itself, the
    steady shape's is numpy's own least squares line on x - 1, and the point forecast their mean."""
    a, beta = 0.12, 0.03
    steps = np.arange(0, 33, EVERY)
    tokens = np.full(N_LINES, 20.0)
    y = np.array([0.0] + [a + beta * math.log(s / END) for s in steps[1:]])
    nll = np.full(N_LINES, 60.0)[None, :] + y[:, None] * tokens[None, :]
    curve = fit(Trajectory.of(steps, nll, tokens), END)
    assert curve.a_fits["log"] == pytest.approx(a, rel=1e-9) and curve.beta_fits["log"] == pytest.approx(beta, rel=1e-9)
    slope, intercept = np.polyfit(steps[1:] / END - 1, y[1:], 1)  # the last WINDOW = 4 evals: all of them here
    assert curve.beta_fits["linear"] == pytest.approx(slope, rel=1e-9)
    assert curve.a_fits["linear"] == pytest.approx(intercept, rel=1e-9)
    assert curve.a == pytest.approx((a + intercept) / 2, rel=1e-9)
    assert forecast(Trajectory.of(steps, nll, tokens), END, 0.08).value == pytest.approx(math.expm1(curve.a), rel=1e-9)


def test_the_crossing_is_the_first_step_past_the_limit_solved_by_hand():
    """Bootstrap curves all on one log trend: the crossing (median and both ends) is the first step at
    which a + beta log(s / end) passes log(1 + limit), found here by walking the steps."""
    a, beta, limit, n = 0.12, 0.03, 0.08, 50
    curve = CurveFit(a, {"log": a}, {"log": beta}, np.full(n, a), np.full(n, beta), np.zeros(n, dtype=np.int64),
                     0.0, lambda s: np.asarray(s, dtype=np.float64), END)
    by_hand = next(s for s in range(25, END + 1) if a + beta * math.log(s / END) > math.log1p(limit))
    assert curve.crossing(limit, after=24) == Crossing(by_hand, by_hand, by_hand)
    assert Crossing(by_hand, by_hand, by_hand).text(END) == f"{by_hand} [{by_hand},{by_hand}]"
    # 60% of the curves never cross: the median says "not before the end", the early end still crosses
    n_never = 3 * n // 2
    never = CurveFit(a, {"log": a}, {"log": beta}, np.r_[np.full(n, a), np.full(n_never, 0.0)],
                     np.full(n + n_never, beta), np.zeros(n + n_never, dtype=np.int64), 0.0, curve.clock, END)
    assert never.crossing(limit, after=24) == Crossing(None, by_hand, None)
    assert Crossing(None, by_hand, None).text(END) == f"not before the end [{by_hand},>{END}]"


@pytest.mark.parametrize("k", [3, 4, 6, 10])
def test_the_interval_covers_the_known_end(k):
    """Over 60 rulers whose lines forget unlike each other: the 90% interval made at the k-th eval holds
    the population's end drift in at least 80% of them (90% nominal; 48 of 60 is the 2% tail of a
    binomial at 90%)."""
    mu = 0.06
    hits = sum(_covers(forecast(first(ruler(seed, mu, 0.5), k), END, 0.08, resamples=300, seed=seed), math.expm1(mu))
               for seed in range(60))
    assert hits / 60 >= 0.8


@pytest.mark.parametrize("k", [4, 6, 10, 16])
def test_a_forecast_that_ignores_line_sampling_is_too_narrow(k):
    """The same rulers and evals, the forecast without the line bootstrap (lines=False): once the curve
    is well seen, what is left is the ruler's sample of lines, and without it the interval misses the
    population's end in most rulers (the full forecast's coverage beside it)."""
    mu = 0.06
    truth = math.expm1(mu)
    full, naive, widths = 0, 0, []
    for seed in range(60):
        trajectory = first(ruler(seed, mu, 0.5), k)
        with_lines = forecast(trajectory, END, 0.08, resamples=300, seed=seed)
        without = forecast(trajectory, END, 0.08, resamples=300, seed=seed, lines=False)
        full += _covers(with_lines, truth)
        naive += _covers(without, truth)
        widths.append((without.hi - without.lo) / (with_lines.hi - with_lines.lo))
    assert full / 60 >= 0.8
    assert naive / 60 <= 0.3
    assert np.median(widths) < 0.6


def _covers(result: Forecast, truth: float) -> bool:
    return result.lo <= truth <= result.hi


def test_a_curve_that_levels_off_under_the_limit_never_crosses():
    """Drift heading to about +2% at the end against a limit of 8%: 'not before the end', and the
    interval's upper end stays under the limit."""
    trajectory = first(ruler(3, 0.02, 0.05), 10)
    result = forecast(trajectory, END, 0.08, resamples=500)
    assert result.crossing == Crossing(None, None, None)
    assert result.crossing.text(END) == "not before the end"
    assert result.hi < 0.08 and not result.over_limit
    assert "forecast_cross=not-before-the-end" in result.line_extras()


def test_a_curve_headed_over_the_limit_crosses_inside_the_run():
    """About +15% at the end against 12%: the crossing is inside the run and its interval holds the
    step the population curve crosses at (solved by hand)."""
    mu = math.log1p(0.15)
    result = forecast(first(ruler(4, mu, 0.1), 6), END, 0.12, resamples=500)
    truth = next(s for s in range(1, END + 1) if mu * shape(s) > math.log1p(0.12))
    assert truth > 40  # after the forecast's own eval
    assert result.crossing.step is not None and result.crossing.lo <= truth <= (result.crossing.hi or END + 1)


def test_the_band_runs_from_the_last_eval_to_the_end_and_round_trips():
    result = forecast(first(ruler(5, 0.05, 0.1), 4), END, 0.08, resamples=200)
    assert result.band[0].step == 24 and result.band[-1].step == END
    assert all(p.lo <= p.hi for p in result.band)
    assert [p.value for p in result.band] == sorted(p.value for p in result.band)  # c > 0: rising
    assert Forecast.from_json(result.to_json()) == result


def test_too_few_evals_or_a_baseline_missing_is_refused():
    trajectory = ruler(6, 0.05, 0.1)
    with pytest.raises(ForecastError, match="needs 3 evals"):
        fit(first(trajectory, 2), END)
    with pytest.raises(ForecastError, match="not the step-0 baseline"):
        Trajectory(trajectory.steps[1:], trajectory.nll[1:], trajectory.tokens)

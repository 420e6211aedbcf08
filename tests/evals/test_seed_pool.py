"""The seed variance pooled across configurations (evals/seeds/sequential.SeedPool, seed_pool,
pooled: what a min_seeds = 2 design's looks decide on) against a one-way ANOVA done by hand in
numpy: the within-configuration mean square of the per-seed statistics and its df. The same check
refuses a pooling that averages the configurations' variances without weighting them by their df."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tatu.evals.seeds.power import CrossedParts
from tatu.evals.seeds.sequential import Design, Estimate, SeedPool, look, pooled, seed_pool
from tatu.evals.seeds.simulate import anova_estimates, crossed_data

# per-seed statistics of four configurations with different means and different seed counts
GROUPS = [[0.031, 0.012], [0.20, 0.23, 0.17, 0.26, 0.19], [-0.05, -0.02, -0.08], [0.4]]


def anova_within(groups) -> tuple[float, int]:
    """The one-way ANOVA's within mean square and its df, from the stacked data: the residuals
    about each group's mean, by a group-indicator design matrix and least squares."""
    values = np.concatenate([np.asarray(g, dtype=float) for g in groups])
    labels = np.concatenate([np.full(len(g), i) for i, g in enumerate(groups)])
    design = (labels[:, None] == np.arange(len(groups))[None, :]).astype(float)
    fitted = design @ np.linalg.lstsq(design, values, rcond=None)[0]
    df = values.size - len(groups)
    return float(((values - fitted) ** 2).sum()) / df, df


def unweighted(groups) -> float:
    """A wrong pooling: the mean of the configurations' own variances, each counted once."""
    return float(np.mean([np.var(g, ddof=1) for g in groups if len(g) > 1]))


def agrees_with_anova(variance: float, df: int, groups) -> bool:
    want, want_df = anova_within(groups)
    return df == want_df and math.isclose(variance, want, rel_tol=1e-12)


def test_the_pool_is_the_within_mean_square_of_a_one_way_anova():
    pool = seed_pool(GROUPS)
    assert agrees_with_anova(pool.variance, pool.df, GROUPS)
    assert pool.df == 1 + 4 + 2 and pool.n_configs == 3  # the lone seed adds no df and no configuration


def test_the_same_check_refuses_a_pooling_not_weighted_by_df():
    assert not agrees_with_anova(unweighted(GROUPS), seed_pool(GROUPS).df, GROUPS)
    # and equal seed counts are where the two coincide: the check is about the weights
    equal = [[0.1, 0.3, 0.2], [1.0, 1.4, 0.9]]
    assert agrees_with_anova(unweighted(equal), seed_pool(equal).df, equal)


def test_random_groups_agree_with_the_anova():
    rng = np.random.default_rng(5)
    for _ in range(50):
        groups = [rng.normal(rng.normal(), rng.uniform(0.1, 2.0), size=rng.integers(1, 8)).tolist()
                  for _ in range(rng.integers(1, 7))]
        if sum(len(g) - 1 for g in groups) == 0:
            with pytest.raises(ValueError):
                seed_pool(groups)
            continue
        pool = seed_pool(groups)
        assert agrees_with_anova(pool.variance, pool.df, groups)


def test_a_pool_of_the_configuration_alone_is_its_own_estimate():
    """Pooling with nothing else gives back the crossed ANOVA's own parts and df (n_seeds - 1)."""
    y = crossed_data(np.random.default_rng(2), 1, 4, -1.0, 0.05, n_lines=50)
    own = anova_estimates(y, 4)[0]
    alone = pooled(own, seed_pool([y[0].mean(axis=1)]))
    assert alone.seed_df == 3
    assert alone.se == pytest.approx(own.se, rel=1e-12) and alone.df == pytest.approx(own.df, rel=1e-12)


def test_the_pooled_estimate_keeps_the_mean_interaction_and_lines_and_counts_the_pooled_df():
    own = Estimate(2, -0.1, CrossedParts(seed=0.5, interaction=0.02, lines=0.001, n_lines=40))
    pool = SeedPool(sum_of_squares=0.9, df=9, n_configs=4)
    got = pooled(own, pool)
    assert (got.mean, got.parts.interaction, got.parts.lines, got.seed_df) == (-0.1, 0.02, 0.001, 9)
    assert got.parts.seed == pytest.approx(0.1 - 0.02)
    # the seed mean square is the pool's variance over the look's own 2 seeds, at the pool's df
    assert got.se ** 2 == pytest.approx(0.1 / 2 + 0.001)
    assert own.df < 3 < got.df  # 1 df alone, about 9 pooled (the lines' part adds its own)
    design = Design("obf", 2, 6)
    assert look(design, got, 0.0).df == got.df and look(design, got, 0.0).t_bound < look(design, own, 0.0).t_bound

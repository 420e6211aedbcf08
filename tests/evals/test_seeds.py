"""evals/seeds/stats.py against independent computations: closed forms and scipy.stats for t, a hand computation for Holm
and the outlier score, simulated normal seeds for the false-flag rate. The paired p (from the
crossed CI's own parts) and its agreement with the CI: tests/evals/test_seeds_crossed.py.
The crossed-design CI: tests/evals/test_seeds_crossed.py; seeds for a stated effect:
tests/evals/test_seeds_power.py."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp

from tatu.evals.seeds import stats as seeds


@pytest.mark.parametrize("n_seeds", [3, 4])
def test_the_outlier_cut_is_the_t_quantile_in_closed_form(n_seeds):
    """Student's t at 1 and 2 df has a closed-form quantile (Cauchy: tan(pi (p - 1/2)); 2 df:
    (2p - 1) / sqrt(2 p (1 - p))): scipy's, as the seeds' statistics call it, against those."""
    p = 1 - 0.04 / (2 * n_seeds)
    by_hand = math.tan(math.pi * (p - 0.5)) if n_seeds == 3 else (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    assert seeds.outlier_cut(n_seeds) == pytest.approx(by_hand, rel=1e-12)


def test_holm_by_hand():
    # p sorted: 0.01 (x4 = 0.04), 0.02 (x3 = 0.06), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> 0.06 monotone)
    assert seeds.holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert seeds.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert seeds.holm([0.9, 0.3]) == pytest.approx([0.9, 0.6])  # 0.3 x 2; 0.9 x 1
    assert seeds.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # 0.8 x 2 capped at 1; monotone
    assert seeds.holm([0.4, 0.4, 0.4]) == pytest.approx([1.0, 1.0, 1.0])  # capped at 1
    with pytest.raises(ValueError):
        seeds.holm([1.2])


def test_holm_keeps_the_order_of_the_raw_p_values_and_ties_stay_tied():
    rng = np.random.default_rng(11)
    for _ in range(500):
        m = int(rng.integers(2, 8))
        # ties on purpose: p drawn from a few values
        p = rng.choice([0.001, 0.01, 0.02, 0.04, 0.2, 0.5], size=m)
        adjusted = seeds.holm(p)
        for i in range(m):
            for j in range(m):
                if p[i] == p[j]:
                    assert adjusted[i] == adjusted[j], (p, adjusted)
                elif p[i] < p[j]:
                    assert adjusted[i] <= adjusted[j], (p, adjusted)
            assert p[i] <= adjusted[i] <= 1.0


def test_leave_one_out_t_flags_the_far_seed_and_only_it():
    values = np.array([0.10, 0.11, 0.09, 0.105, 0.60])
    for i, t in enumerate(seeds.leave_one_out_t(values)):
        rest = np.delete(values, i)  # by hand: the seed against the mean and SD of the others
        assert t == pytest.approx((values[i] - rest.mean()) / (rest.std(ddof=1) * math.sqrt(1 + 1 / 4)))
    assert seeds.outlier_cut(5) == pytest.approx(sp.t.ppf(1 - 0.04 / 10, 3))
    assert seeds.outliers(values) == [4]
    assert seeds.outliers([0.10, 0.11, 0.09, 0.105, 0.12]) == []
    assert seeds.outliers([0.10, 0.11, 0.09, 0.60]) == [3]  # three seeds that agree and one far away, at 4 seeds
    assert seeds.outliers([0.1, 0.1, 0.1, 0.1]) == [] and seeds.outliers([0.1, 5.0]) == []


def test_no_flag_at_3_seeds_where_the_others_spread_has_1_df():
    """replay-n6's per-seed changes in the demo: at 3 seeds the other two's SD has 1 df, so a near tie
    of the two gives t = +157 beyond the Cauchy cut; no flag is raised there, however far."""
    demo = [-0.308, -0.3269, -0.3270]
    t = seeds.leave_one_out_t(demo)[0]
    rest = demo[1:]  # by hand: the seed against the other two
    by_hand = (demo[0] - sum(rest) / 2) / (abs(rest[0] - rest[1]) / math.sqrt(2) * math.sqrt(1.5))
    assert t == pytest.approx(by_hand) and abs(t) > seeds.outlier_cut(3)  # the old rule flagged it
    assert seeds.OUTLIER_MIN_SEEDS == 4
    assert seeds.outliers(demo) == [] and seeds.outliers([0.10, 0.11, 0.60]) == []


@pytest.mark.parametrize("n_seeds", [4, 5, 10])
def test_normal_seeds_are_flagged_in_at_most_5_percent_of_config_metrics(n_seeds):
    rng = np.random.default_rng(n_seeds)
    flagged = [bool(seeds.outliers(rng.normal(0.05, 0.02, n_seeds))) for _ in range(4000)]
    rate = float(np.mean(flagged))
    print(f"false-flag rate at {n_seeds} seeds: {rate:.4f}")
    # Bonferroni at 4% bounds it by 4%; 4000 draws put a 4% rate at +-0.3 points (SD).
    assert rate <= 0.05, rate
    # ... and the rule is live: the leave-one-out t of normal seeds is exactly t-distributed, so
    # the flags come near the 4% it is built for (2% is over 6 SDs below), never a silent 0.
    assert rate >= 0.02, rate


def test_run_lines_log_ratio_is_the_paired_corpus_log_ratio():
    run = seeds.RunLines(np.array([2.0, 4.0]), np.array([1, 3]), np.array([3.0, 5.0]), np.array([1, 3]))
    assert run.log_ratio() == pytest.approx(8 / 4 - 6 / 4)
    with pytest.raises(ValueError, match="same lines"):
        seeds.RunLines(np.ones(2), np.ones(2), np.ones(3), np.ones(3))



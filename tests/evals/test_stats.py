"""tatu.evals.stats against naive computations, scipy, and simulated language-model scorings."""

import math

import numpy as np
import pytest
import scipy.stats

from tatu.evals.stats import (
    CorpusCI,
    PairedCI,
    bootstrap_ppl,
    corpus_ppl,
    minimum_detectable_effect,
    paired_ratio,
)

RULER_LINES = 166  # the operator's English ruler


def naive_unpaired_interval(nll_a, tok_a, nll_b, tok_b, n_resamples=2000, seed=0):
    """(lo, hi, sd) of ppl_b / ppl_a and of its log, the lines of a and of b resampled
    independently: what ignoring the pairing gives (the product only uses the paired ratio)."""
    rng = np.random.default_rng(seed)
    logs = []
    for _ in range(n_resamples):
        ia, ib = rng.integers(0, nll_a.size, nll_a.size), rng.integers(0, nll_b.size, nll_b.size)
        logs.append(nll_b[ib].sum() / tok_b[ib].sum() - nll_a[ia].sum() / tok_a[ia].sum())
    lo, hi = np.percentile(logs, [2.5, 97.5])
    return math.exp(lo), math.exp(hi), float(np.std(logs, ddof=1))


def simulate_scoring(rng, n_lines, shift=0.0, noise_per_token=0.5):
    """Per-line NLL sums of two scorings of the same lines, as a language model gives them.

    Lines have 10-60 tokens and a per-token difficulty that varies a lot from line to line
    (shared by both scorings); b is a shifted by `shift` nats per token (log of the ppl
    ratio) plus independent per-token noise.
    """
    tok = rng.integers(10, 61, size=n_lines)
    difficulty = rng.lognormal(mean=math.log(3.5), sigma=0.4, size=n_lines)
    nll_a = tok * difficulty + rng.normal(0.0, noise_per_token, n_lines) * np.sqrt(tok)
    nll_b = nll_a + tok * shift + rng.normal(0.0, noise_per_token, n_lines) * np.sqrt(tok)
    return nll_a, tok, nll_b, tok.copy()


def test_corpus_ppl_equals_a_naive_loop():
    rng = np.random.default_rng(3)
    nll_a, tok, _, _ = simulate_scoring(rng, 50)
    total_nll = 0.0
    total_tok = 0
    for line_nll, line_tok in zip(nll_a.tolist(), tok.tolist()):
        total_nll += line_nll
        total_tok += line_tok
    assert corpus_ppl(nll_a, tok) == pytest.approx(math.exp(total_nll / total_tok), rel=1e-12)
    # Token weighting matters: the mean of per-line perplexities is a different number.
    assert corpus_ppl(nll_a, tok) != pytest.approx(float(np.mean(np.exp(nll_a / tok))), rel=1e-3)


def test_bootstrap_ppl_point_estimate_and_counts():
    rng = np.random.default_rng(4)
    nll_a, tok, _, _ = simulate_scoring(rng, 80)
    ci = bootstrap_ppl(nll_a, tok, n_resamples=500)
    assert isinstance(ci, CorpusCI)
    assert ci.ppl == pytest.approx(corpus_ppl(nll_a, tok), rel=1e-12)
    assert ci.n_lines == 80 and ci.n_tokens == int(tok.sum())
    assert ci.lo < ci.ppl < ci.hi
    assert ci.se > 0


def test_bootstrap_ci_agrees_with_scipy_percentile_bootstrap():
    rng = np.random.default_rng(5)
    n_lines = 2000
    tok = rng.integers(10, 61, size=n_lines)
    # Short lines are harder here, so a wrong (per-line averaged) estimator lands elsewhere.
    difficulty = rng.lognormal(mean=math.log(3.5), sigma=0.4, size=n_lines) * (70 / (tok + 10))
    nll = tok * difficulty

    ours = bootstrap_ppl(nll, tok, n_resamples=2000, seed=0)

    def ratio_estimator(nll_sample, tok_sample, axis=-1):
        return np.exp(nll_sample.sum(axis=axis) / tok_sample.sum(axis=axis))

    def per_line_mean(nll_sample, tok_sample, axis=-1):
        return np.exp((nll_sample / tok_sample).mean(axis=axis))

    def scipy_ci(statistic):
        res = scipy.stats.bootstrap((nll, tok), statistic, paired=True, vectorized=True,
                                    n_resamples=2000, method="percentile",
                                    confidence_level=0.95, rng=np.random.default_rng(1))
        return res.confidence_interval, res.standard_error

    (ref_lo, ref_hi), ref_se = scipy_ci(ratio_estimator)
    # Monte Carlo error of a 2.5% quantile from 2000 replicates is ~0.06 SE per run, so two
    # independent runs differ by ~0.09 SE: allow 4 times that.
    tolerance = 0.35 * ours.se
    assert abs(ours.lo - ref_lo) < tolerance
    assert abs(ours.hi - ref_hi) < tolerance
    assert ours.se == pytest.approx(ref_se, rel=0.1)

    # The comparison is sharp enough to reject a plausible wrong estimator.
    (bad_lo, bad_hi), _ = scipy_ci(per_line_mean)
    assert abs(bad_lo - ours.lo) > 5 * tolerance and abs(bad_hi - ours.hi) > 5 * tolerance


def test_paired_ci_is_narrower_than_unpaired_on_correlated_lines():
    rng = np.random.default_rng(6)
    nll_a, tok_a, nll_b, tok_b = simulate_scoring(rng, RULER_LINES, shift=math.log(1.03))
    paired = paired_ratio(nll_a, tok_a, nll_b, tok_b)
    unpaired_lo, unpaired_hi, unpaired_sd = naive_unpaired_interval(nll_a, tok_a, nll_b, tok_b)
    assert (paired.hi - paired.lo) < 0.3 * (unpaired_hi - unpaired_lo)
    assert paired.se_log_ratio < 0.3 * unpaired_sd
    assert paired.mde < minimum_detectable_effect(unpaired_sd)


@pytest.mark.parametrize("seed", [10, 11, 12])
@pytest.mark.parametrize("change", [1.03, 1 / 1.03])
def test_planted_3_percent_change_on_the_ruler_is_detected(seed, change):
    rng = np.random.default_rng(seed)
    nll_a, tok_a, nll_b, tok_b = simulate_scoring(rng, RULER_LINES, shift=math.log(change))
    result = paired_ratio(nll_a, tok_a, nll_b, tok_b)
    assert isinstance(result, PairedCI)
    assert result.lo <= change <= result.hi
    assert (result.lo > 1.0) if change > 1 else (result.hi < 1.0)
    assert result.p_value < 0.05
    assert result.mde < 0.03
    # Ignoring the pairing, the same 3% is lost in line-to-line spread: two independent
    # intervals overlap and the operator's earlier comparison saw no change.
    unpaired_lo, unpaired_hi, _ = naive_unpaired_interval(nll_a, tok_a, nll_b, tok_b)
    assert unpaired_lo < 1.0 < unpaired_hi


@pytest.mark.parametrize("seed", [10, 11, 12])
def test_no_change_is_not_detected(seed):
    rng = np.random.default_rng(seed)
    nll_a, tok_a, nll_b, tok_b = simulate_scoring(rng, RULER_LINES, shift=0.0)
    result = paired_ratio(nll_a, tok_a, nll_b, tok_b)
    assert result.lo < 1.0 < result.hi
    assert result.p_value > 0.05


def test_p_value_is_roughly_uniform_under_the_null():
    p_values = []
    for seed in range(200):
        rng = np.random.default_rng(1000 + seed)
        nll_a, tok_a, nll_b, tok_b = simulate_scoring(rng, RULER_LINES, shift=0.0)
        p_values.append(paired_ratio(nll_a, tok_a, nll_b, tok_b, n_resamples=1000,
                                     seed=seed).p_value)
    p_values = np.array(p_values)
    assert 0.01 <= np.mean(p_values < 0.05) <= 0.10
    assert 0.40 <= np.mean(p_values < 0.5) <= 0.60
    assert np.all((p_values > 0) & (p_values <= 1))


def test_mde_is_the_effect_detected_with_80_percent_power():
    reference = paired_ratio(*simulate_scoring(np.random.default_rng(77), RULER_LINES))
    change = 1.0 + reference.mde
    detected = 0
    n_runs = 100
    for seed in range(n_runs):
        rng = np.random.default_rng(2000 + seed)
        scoring = simulate_scoring(rng, RULER_LINES, shift=math.log(change))
        detected += paired_ratio(*scoring, n_resamples=500, seed=seed).p_value < 0.05
    assert 0.65 <= detected / n_runs <= 0.93


def test_mde_shrinks_like_one_over_sqrt_n():
    mdes = [paired_ratio(*simulate_scoring(np.random.default_rng(8), n), n_resamples=1000).mde
            for n in (166, 656, 2624)]
    assert mdes[0] > mdes[1] > mdes[2] > 0
    assert 3.0 < mdes[0] / mdes[2] < 5.5  # 16x the lines: ~4x smaller


def test_minimum_detectable_effect_formula():
    assert minimum_detectable_effect(0.01) == pytest.approx(math.expm1(2.8016 * 0.01), rel=1e-4)
    assert minimum_detectable_effect(0.0) == 0.0


def test_results_are_reproducible_and_depend_on_the_seed():
    scoring = simulate_scoring(np.random.default_rng(9), RULER_LINES, shift=0.01)
    assert paired_ratio(*scoring) == paired_ratio(*scoring)
    assert paired_ratio(*scoring, seed=1).lo != paired_ratio(*scoring, seed=2).lo
    assert bootstrap_ppl(scoring[0], scoring[1]) == bootstrap_ppl(scoring[0], scoring[1])


def test_paired_refuses_different_line_sets():
    rng = np.random.default_rng(12)
    nll_a, tok_a, _, _ = simulate_scoring(rng, 100)
    nll_b, tok_b, _, _ = simulate_scoring(rng, 60)
    with pytest.raises(ValueError, match="same lines"):
        paired_ratio(nll_a, tok_a, nll_b, tok_b)


@pytest.mark.parametrize("nll, tok, message", [
    ([1.0, 2.0], [3], "nll_sum has 2 lines but n_tokens has 1"),
    ([], [], "empty"),
    ([1.0, float("nan")], [3, 4], r"nll_sum\[1\]"),
    ([1.0, 2.0], [3, 0], r"n_tokens\[1\] = 0"),
    ([1.0, 2.0], [3, 2.5], r"n_tokens\[1\] = 2.5"),
    ([[1.0]], [[3]], "1-D"),
])
def test_bad_line_sums_are_refused_with_the_variable_named(nll, tok, message):
    with pytest.raises(ValueError, match=message):
        corpus_ppl(nll, tok)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="level"):
        bootstrap_ppl([1.0, 2.0], [3, 4], level=95)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_ppl([1.0, 2.0], [3, 4], n_resamples=10)


def test_p_value_at_the_bootstrap_floor_prints_as_an_upper_bound():
    """All replicates on one side: p is at its floor 2/(B+1), which only bounds the true p."""
    from tatu.formats import fmt_p

    rng = np.random.default_rng(3)
    tok = rng.integers(5, 30, size=60).astype(float)
    nll_a = rng.uniform(1.0, 2.0, size=60) * tok
    for resamples, shown in ((2000, "<0.001"), (200, "<0.01"), (1000, "<0.002")):
        paired = paired_ratio(nll_a, tok, nll_a * 1.5, tok, n_resamples=resamples)
        assert paired.p_value == pytest.approx(2 / (resamples + 1))
        assert fmt_p(paired.p_value, resamples) == shown
        assert float(shown[1:]) >= paired.p_value  # "<" is never below the value it bounds
    assert fmt_p(3 / 2001) == "0.001" and fmt_p(0.073) == "0.073" and fmt_p(1.0) == "1.000"
    assert fmt_p(None) == fmt_p(float("nan")) == "n/a"

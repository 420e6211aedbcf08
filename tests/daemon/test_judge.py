"""daemon.judge.decide and daemon.judge.verdict on crafted per-line scores.

The numbers are built by hand so each rule is checked in both directions: what must trip
trips, what must not does not.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tatu.daemon.config import load_config
from tatu.daemon.judge import decide
from tatu.daemon.judge import verdict as judge
from tatu.daemon.run.records import Best
from tatu.daemon.run.state import RunState
from tatu.daemon.suite import Suite
from tatu.evals.scoring import SetResult
from tatu.evals.sets import EvalLine, EvalSet

N_LINES = 166


def config(**env):
    base = {"TATU_DATA": "d", "TATU_SEED_CKPT": "s", "TATU_EVAL_RESAMPLES": "500"}
    return load_config({**base, **{k: str(v) for k, v in env.items()}})[0]


def suite() -> Suite:
    lines = [EvalLine([0, 1], [False, True], "x")] * N_LINES
    sets = {name: EvalSet(name, Path(name), "text", lines) for name in ("sftHeld", "ptVal", "enRuler")}
    return Suite(sets=sets, notes={}, file_hashes={}, gen_pairs=[], dictionary=None)


def scores(ppl_factor: float, seed: int, noise: float = 0.0, name: str = "enRuler") -> SetResult:
    """Per-line sums of a 'model': line difficulty shared across calls (seeded), times a factor."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(10, 60, N_LINES)
    difficulty = rng.uniform(2.0, 5.0, N_LINES)  # nats per token, shared: scorings are paired
    jitter = np.random.default_rng(seed).normal(0, noise, N_LINES)
    nll = tokens * (difficulty + math.log(ppl_factor) + jitter)
    lines = {"index": list(range(N_LINES)), "nll_sum": nll.tolist(), "n_tokens": tokens.tolist(),
             "n_chars": tokens.tolist(), "n_bytes": tokens.tolist()}
    payload = {"name": name, "kind": "text", "n_lines_total": N_LINES, "lines_sha256": f"lines of {name}",
               "lines": lines, "extra": {"file_sha256": None}}
    return SetResult.from_json(payload, n_resamples=200, seed=0)


def results(sft: float, ruler: float, seed: int = 1, noise: float = 0.0) -> dict:
    return {"sftHeld": scores(sft, seed, noise, "sftHeld"), "ptVal": scores(1.0, seed, noise, "ptVal"),
            "enRuler": scores(ruler, seed + 7, noise)}


def test_abort_on_the_point_estimate_only_above_the_limit():
    cfg = config(MIX_FORGET_LIMIT=0.08)
    state = RunState(baseline=results(1.0, 1.0))
    below = decide(8, results(0.99, 1.07), state, suite(), cfg, 1.0, None)
    above = decide(8, results(0.99, 1.09), state, suite(), cfg, 1.0, None)
    assert below.abort_reason is None and below.record.drift.value == pytest.approx(0.07, abs=1e-9)
    assert above.abort_reason and "MIX_FORGET_LIMIT 8.0%" in above.abort_reason


def test_ci_mode_aborts_only_when_the_lower_bound_exceeds_the_limit():
    cfg = config(MIX_FORGET_LIMIT=0.08, MIX_FORGET_CI=1)
    state = RunState(baseline=results(1.0, 1.0))
    # point estimate above the limit, but noisy enough that the CI reaches below it
    noisy = decide(8, results(1.0, 1.085, noise=0.6), state, suite(), cfg, 1.0, None)
    drift = noisy.record.drift
    assert drift.value > 0.08 and drift.lo < 0.08
    assert noisy.abort_reason is None
    # the same shift measured tightly: the whole CI is above the limit
    tight = decide(8, results(1.0, 1.12), state, suite(), cfg, 1.0, None)
    assert tight.record.drift.lo > 0.08 and "CI lower bound" in tight.abort_reason
    # and the default mode would have aborted the noisy one
    assert decide(8, results(1.0, 1.085, noise=0.6), state, suite(), config(MIX_FORGET_LIMIT=0.08), 1.0, None).abort_reason


def test_best_is_chosen_by_sftheld_even_while_the_ruler_worsens():
    cfg = config(MIX_FORGET_LIMIT=1)  # a fraction: at most 1 (+100%)
    state = RunState(baseline=results(1.0, 1.0), best=Best(0, "sftHeld", scores(1.0, 1).ppl))
    better_sft_worse_ruler = decide(8, results(0.9, 1.5), state, suite(), cfg, 1.0, None)
    worse_sft_better_ruler = decide(8, results(1.1, 0.8), state, suite(), cfg, 1.0, None)
    assert better_sft_worse_ruler.best and not worse_sft_better_ruler.best


def test_drift_tronco_is_na_without_a_reference_and_paired_with_one():
    cfg = config()
    no_ref = decide(8, results(1.0, 1.05), RunState(baseline=results(1.0, 1.0)), suite(), cfg, 1.0, None)
    assert no_ref.record.drift_tronco is None and "drift_tronco n/a" in no_ref.line
    trunk = {"enRuler": scores(1.0 / 1.147, 99)}  # the seed starts 14.7% worse
    state = RunState(baseline=results(1.0, 1.0), trunk_reference=trunk)
    with_ref = decide(8, results(1.0, 1.0), state, suite(), cfg, 1.0, None)
    assert with_ref.record.drift.value == pytest.approx(0.0, abs=1e-12)
    assert with_ref.record.drift_tronco.value == pytest.approx(0.147, rel=1e-9)
    assert "drift +0.0% drift_tronco +14.7%" in with_ref.line


def history(*pairs, limit_cfg=None):
    base = results(1.0, 1.0)
    state = RunState(baseline=base)
    cfg = limit_cfg or config()
    out = [decide(0, base, state, suite(), cfg, 1.0, None).record]
    for step, (sft, ruler) in enumerate(pairs, start=1):
        out.append(decide(step * 8, results(sft, ruler, noise=0.05), state, suite(), cfg, 1.0, None).record)
    return out, cfg


def test_verdicts_both_ways():
    holds, cfg = history((0.97, 1.01), (0.95, 1.02))
    assert judge(holds, None, cfg).outcome == "holds"
    forgets, cfg = history((0.97, 1.12), (0.95, 1.05))  # over the 10% limit at one eval
    assert judge(forgets, None, cfg).outcome == "forgets"
    assert judge(holds, "drift +12.0% > MIX_FORGET_LIMIT", cfg).outcome == "forgets"
    flat, cfg = history((1.0, 1.0),)
    assert judge(flat, None, cfg).outcome == "flat"
    inconclusive, cfg = history((1.03, 1.05),)  # sftHeld worse, ruler moved: neither holds nor flat
    assert judge(inconclusive, None, cfg).outcome == "inconclusive"

"""ptVal's change over seeds in the sweep's statistics (sweep/judge/sets.py): shown beside drift,
sftHeld and the held-out sets, so that a loss of Portuguese text is said; against a naive mean of
each seed's log perplexity ratio, and absent where the members' data has no ptVal."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tatu.sweep.judge.records import MemberResult
from tatu.sweep.judge.sets import set_stats

N_LINES = 12


def _lines(seed: int, growth: dict[str, float], sets: tuple[str, ...]) -> dict:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(5, 20, N_LINES)
    out = {}
    for name in sets:
        per_token = np.random.default_rng(len(name)).uniform(1.5, 3.0, N_LINES)  # the same lines for every seed
        out[name] = {"nll_sum": (tokens * per_token * growth.get(name, 1.0) * rng.uniform(0.98, 1.02, N_LINES)).tolist(),
                     "line_tokens": tokens.tolist(), "line_index": list(range(N_LINES))}
    return out


def _member(seed: int, sets: tuple[str, ...]) -> MemberResult:
    base = _lines(seed, {}, sets)
    end = _lines(seed, {"ptVal": 1.4 + 0.05 * seed, "sftHeld": 0.8}, sets)
    return MemberResult(member=f"c-s{seed}", config="c", seed=seed, values={}, state="done", verdict=None, steps=8,
                        lines={"base": base, "end": end})


def _naive_log_ratio(member: MemberResult, name: str) -> float:
    start, end = member.lines["base"][name], member.lines["end"][name]
    return (sum(end["nll_sum"]) / sum(end["line_tokens"])) - (sum(start["nll_sum"]) / sum(start["line_tokens"]))


def test_ptval_change_over_seeds_is_in_the_stats_and_equals_the_naive_mean():
    members = [_member(seed, ("sftHeld", "ptVal", "enRuler")) for seed in (1, 2, 3)]
    stats, _ = set_stats(members, None, 0)
    assert list(stats)[:3] == ["drift", "sftHeld", "ptVal"]
    naive = [_naive_log_ratio(m, "ptVal") for m in members]
    got = stats["ptVal"]
    assert got.log_mean == pytest.approx(sum(naive) / 3, abs=1e-9)
    assert got.per_seed == pytest.approx({str(m.seed): math.expm1(n) for m, n in zip(members, naive)}, abs=1e-9)
    assert got.change.lo > 0.3  # it rose by 40-55%: a loss the prose must say


def test_no_ptval_in_the_data_no_ptval_stats():
    members = [_member(seed, ("sftHeld", "enRuler")) for seed in (1, 2)]
    stats, _ = set_stats(members, None, 0)
    assert "ptVal" not in stats and set(stats) == {"drift", "sftHeld"}

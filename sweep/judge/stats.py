"""Per-configuration statistics over seeds from the members' per-line scores (tatu.evals.seeds.stats).

A member result (sweep/judge/records.py MemberResult) holds its per-line scores under two keys, a start and an end: "base"/"end" (the
daemon's lines at step 0 and at the member's last eval; an interpolated member's re-scored checkpoints) or the common step's (sweep/judge/common_step.py). Every member of a
comparison must have scored the same lines (checked by line index): the design is crossed,
seeds x shared lines. Resampling seeds are fixed per statistic, so the same files give the same
numbers.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

from tatu.evals.seeds import stats as st
from tatu.records import LogRatio
from tatu.sweep.judge.records import ConfigStat, MemberResult, Outlier, PairedDiff

RESAMPLES = 2000
HALVES = {"dev": 0, "judge": 1}


def half_of(scores: dict, half: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(nll sums, token counts, line indices) of one set's per-line scores, on `half` of its lines (None: all)."""
    nll, tok, index = np.asarray(scores["nll_sum"]), np.asarray(scores["line_tokens"]), np.asarray(scores["line_index"])
    if half is None:
        return nll, tok, index
    keep = index % 2 == HALVES[half]
    return nll[keep], tok[keep], index[keep]


def run_lines(result: MemberResult, set_name: str, half: str | None = None, base: str = "base", end: str = "end") -> st.RunLines:
    nb, tb, ib = half_of(result.lines[base][set_name], half)
    ne, te, ie = half_of(result.lines[end][set_name], half)
    if not np.array_equal(ib, ie):
        raise ValueError(f"member {result.member}: {set_name} scored on other lines at its start than at its end")
    return st.RunLines(nb, tb, ne, te)


def crossed_runs(results: list[MemberResult], set_name: str, half: str | None, base: str = "base", end: str = "end"
                 ) -> list[st.RunLines]:
    """The members' runs on one set, checked to be scored on the same lines (by line index)."""
    first = half_of(results[0].lines[base][set_name], half)[2]
    for r in results[1:]:
        if not np.array_equal(half_of(r.lines[base][set_name], half)[2], first):
            raise ValueError(f"member {r.member}: {set_name} scored on other lines than member "
                             f"{results[0].member} (the seeds of a sweep must share their lines)")
    return [run_lines(r, set_name, half, base, end) for r in results]


def _rel(x: float) -> float:
    return math.expm1(x)


def _seed_rng(index: int, set_name: str) -> list[int]:
    """The resampling seed of one statistic: its position and its set's name (hashed, so two
    sets whose names have the same length never share their draws)."""
    return [index, int.from_bytes(hashlib.sha256(set_name.encode()).digest()[:4], "big")]


def _outliers(usable: list[MemberResult], est: list[float]) -> tuple[Outlier, ...]:
    if len(est) < 3:
        return ()
    t = st.leave_one_out_t(est)
    return tuple(Outlier(usable[i].seed, t[i]) for i in st.outliers(est))


def config_stats(results: list[MemberResult], set_name: str, half: str | None, index: int,
                 base: str = "base", end: str = "end") -> ConfigStat | None:
    usable = [r for r in results if r.has(end)]
    if not usable:
        return None
    runs = crossed_runs(usable, set_name, half, base, end)
    est = [r.log_ratio() for r in runs]
    ci = st.crossed_ci(runs, n_resamples=RESAMPLES, seed=_seed_rng(index, set_name))
    return ConfigStat.of(ci, {str(r.seed): _rel(e) for r, e in zip(usable, est)}, _outliers(usable, est))


def paired_stats(results: list[MemberResult], baseline: list[MemberResult], set_name: str, half: str | None, index: int,
                 base: str = "base", end: str = "end") -> PairedDiff | None:
    by_seed = {r.seed: r for r in baseline if r.has(end)}
    pairs = [(by_seed[r.seed], r) for r in results if r.has(end) and r.seed in by_seed]
    if len(pairs) < 2:
        return None
    runs = crossed_runs([r for _, r in pairs] + [b for b, _ in pairs], set_name, half, base, end)
    config_runs, base_runs = runs[:len(pairs)], runs[len(pairs):]
    ci = st.crossed_ci(config_runs, base_runs, n_resamples=RESAMPLES, seed=_seed_rng(1000 + index, set_name))
    a_est, b_est = [r.log_ratio() for r in config_runs], [r.log_ratio() for r in base_runs]
    sd = float(np.std(np.subtract(a_est, b_est), ddof=1))
    # p and t from the interval's own SE and df (seeds x lines), so p < 0.05 exactly when the CI excludes 0
    t = ci.mean / ci.se if ci.se > 0 else None
    return PairedDiff(LogRatio(ci.mean, ci.lo, ci.hi), p_value=ci.p_value, t=t,
                      df=ci.df if math.isfinite(ci.df) else None, n_seeds=len(pairs), seed_sd=sd, mde=_rel(ci.mde),
                      parts=ci.parts)

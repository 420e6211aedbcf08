"""A configuration's looks from its members' per-line scores: the same function for the scheduler
(which logs each look before acting on it) and for `tatu sweep report` (which recomputes them all
and checks the log: sweep/judge/looks_log.check_agrees).

The look at n seeds uses the configuration's first n members in the plan's seed order (all finished:
a later seed that finished first waits for its turn), their crossed CI (evals/seeds/stats.crossed_ci,
resampling seeded by the configuration, the set and n, so the same files give the same look) and the
criterion's threshold on the log scale. A criterion is judged sequentially when it bounds a CI's
upper end (`METRIC_hi < VALUE`): looks stop at its first decision other than continue.

A design that pools the seed variance (min_seeds = 2, evals/seeds/sequential.py) also takes the
per-seed statistics of the other configurations' members `pool_of` names for that look (the
scheduler: each one's first finished seeds, at most n, when the look is made; the report: those the
log names), and logs them with the look."""
from __future__ import annotations

import hashlib
import math
from typing import Callable

from tatu.evals.seeds import stats as st
from tatu.evals.seeds.sequential import Design, estimate_of, look, pooled, seed_pool
from tatu.sweep.plan.design import criterion_set
from tatu.sweep.plan.rule import Condition
from tatu.sweep.judge.records import MemberResult
from tatu.sweep.judge.looks_log import LoggedLook, PooledGroup
from tatu.sweep.judge.stats import RESAMPLES, crossed_runs


# (criterion as written, n seeds) -> the other configurations' members to pool, each (its key, its
# results in seed order)
PoolSource = Callable[[str, int], list[tuple[str, list[MemberResult]]]]


def _resampling_seed(config: str, set_name: str, n_seeds: int) -> list[int]:
    return [n_seeds, int.from_bytes(hashlib.sha256(f"{config}/{set_name}".encode()).digest()[:4], "big")]


def config_looks(design: Design, config: str, condition: Condition, effective: dict, results: list[MemberResult],
                 half: str | None = None, pool_of: PoolSource | None = None) -> list[LoggedLook]:
    """Every look the files allow, up to the first decision. `results`: the configuration's member
    results in seed order (sweep/judge/analysis.member_result: per-line "base"/"end" scores once finished).
    `pool_of`: what a pooling design pools beside them (None: nothing else); unused otherwise."""
    set_name = criterion_set(condition)
    if set_name is None:
        raise ValueError(f"{condition.text()} is not judged sequentially (only METRIC_hi < VALUE criteria are)")
    threshold = math.log1p(condition.threshold(effective))
    finished = []
    for result in results:
        if not result.has("end"):
            break
        finished.append(result)
    out = []
    for n in range(design.min_seeds, min(len(finished), design.max_seeds) + 1):
        first = finished[:n]
        runs = crossed_runs(first, set_name, half)
        estimate = estimate_of(st.crossed_ci(runs, n_resamples=RESAMPLES, seed=_resampling_seed(config, set_name, n)))
        groups = None
        if design.pools_seed_variance:
            # a lone seed has no spread to give: such a group is neither pooled nor logged
            groups = [(key, group) for key, group in (pool_of(condition.text(), n) if pool_of else []) if len(group) >= 2]
            pool = seed_pool([[r.log_ratio() for r in runs]]
                             + [[r.log_ratio() for r in crossed_runs(group, set_name, half)] for _, group in groups])
            estimate = pooled(estimate, pool)
        decided = look(design, estimate, threshold)
        out.append(LoggedLook(config, condition.text(), tuple(r.member for r in first),
                              tuple(int(r.steps or 0) for r in first), decided,
                              None if groups is None else tuple(
                                  PooledGroup(key, tuple(r.member for r in group), tuple(int(r.steps or 0) for r in group))
                                  for key, group in groups)))
        if decided.decision != "continue":
            break
    return out

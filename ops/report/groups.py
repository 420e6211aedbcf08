"""The run report's runs grouped by configuration: a sweep's member runs of one configuration at
several seeds are one group (one colour, one CI band, one sentence); any other run is a group of
its own, so a report of two unrelated runs reads as it did.

A run is a sweep member when its run dir lies in sweeps/<name>/runs/ beside that sweep's
plan.lock.json and the lock lists it: the lock names its configuration key and seed (the member
name `<key>-s<seed>` is not parsed: a key may itself end in `-s<digits>`).

A group's band is the CI of the mean over its seeds (of the change vs step 0) with the crossed model of
evals/seeds/stats.py (seeds x the lines every seed scored), from the per-line scores the daemon
keeps under TATU_EVAL_LINES=1 (every sweep member runs with it). At a step where a seed lacks
them, or where fewer seeds reached it, the band covers the seeds that have them there (Band.n_seeds
says how many); a group of one run keeps that run's own CI from its events (ops/report/plots.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tatu.daemon.run.paths import SweepDir
from tatu.evals.seeds.stats import RunLines, crossed_ci
from tatu.ops.report.runs import RunRecord

# Resamples of a band's crossed CI: the sweep report's count (sweep/stats.py), so a band at a
# member's end is the CI its table prints for the same lines (up to the resampling seed).
BAND_RESAMPLES = 2000


@dataclass(frozen=True)
class RunGroup:
    """One configuration's runs: a sweep's members of one configuration key, or one run alone."""

    name: str  # the configuration key (replay-n6), or the run's own name when it is no sweep member
    runs: tuple[RunRecord, ...]
    seeds: tuple[int | None, ...]  # each run's TATU_SEED as the sweep's lock has it (None: not a member)
    sweep: str | None = None  # the sweep whose lock named the configuration

    @property
    def is_configuration(self) -> bool:
        """Several runs of one configuration (seeds), as opposed to one run standing for itself."""
        return self.sweep is not None and len(self.runs) > 1


@dataclass(frozen=True)
class Membership:
    sweep: str
    config_key: str
    seed: int


def sweep_membership(run_dir: Path) -> Membership | None:
    """The sweep configuration and seed of a member run dir, from its sweep's lock; None otherwise."""
    from tatu.sweep.errors import SweepError
    from tatu.sweep.plan.lock import read_lock

    run_dir = Path(run_dir).resolve()
    sweep = SweepDir.of_member(run_dir)
    if sweep is None:
        return None
    try:
        locked = read_lock(sweep.path)
    except SweepError:
        return None
    found = next((m for m in locked.members_of() if m.run == run_dir.name), None)
    return Membership(locked.plan.name, found.config_key, found.seed) if found else None


def group_runs(runs: list[RunRecord]) -> list[RunGroup]:
    """Runs of one sweep configuration together (in first-seen order, seeds ascending); every other run alone."""
    keyed: dict[tuple, list[tuple[RunRecord, Membership | None]]] = {}
    for run in runs:
        member = sweep_membership(run.run_dir)
        key = (member.sweep, member.config_key) if member else ("", id(run))
        keyed.setdefault(key, []).append((run, member))
    groups = []
    for key, found in keyed.items():
        found.sort(key=lambda pair: pair[1].seed if pair[1] else 0)
        first = found[0][1]
        groups.append(RunGroup(name=first.config_key if first else found[0][0].name,
                               runs=tuple(run for run, _ in found), seeds=tuple(m.seed if m else None for _, m in found),
                               sweep=first.sweep if first else None))
    return groups


# --- a group's band: the crossed CI at each eval step ---------------------------------------------

@dataclass(frozen=True)
class Band:
    """A group's CI per eval step, in the plot's units: steps ascending, lo <= mean <= hi at each."""

    steps: tuple[int, ...]
    mean: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    n_seeds: tuple[int, ...]  # how many seeds the CI at each step is over (the crossed CI: seeds x lines)


def _lines(run: RunRecord, step: int, set_name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(nll sums, token counts, line indices) the daemon kept for `set_name` at `step`; None if not kept."""
    from tatu.sweep.judge.common_step import lines_at

    kept = lines_at(run.run_dir, step)
    scores = (kept or {}).get(set_name)
    if scores is None:
        return None
    return (np.asarray(scores["nll_sum"], dtype=np.float64), np.asarray(scores["line_tokens"], dtype=np.float64),
            np.asarray(scores["line_index"]))


def _crossed_at(group: RunGroup, step: int, set_name: str, starts: list, seed: int):
    """(CI of the mean log ppl, CI of the mean log ratio vs step 0, seeds) at `step` over the seeds
    that kept their lines there on the same lines as each other and as their step 0; None when none did."""
    ends, changes, index = [], [], None
    for run, start in zip(group.runs, starts):
        end = _lines(run, step, set_name) if any(e.step == step for e in run.evals) else None
        if end is None or start is None or not np.array_equal(start[2], end[2]):
            continue
        if index is not None and not np.array_equal(index, end[2]):
            return None  # the crossed design needs every seed on the same lines
        index = end[2]
        # a start of zero NLL: the log ratio is the end's own log perplexity
        ends.append(RunLines(np.zeros_like(end[0]), np.ones_like(end[1]), end[0], end[1]))
        changes.append(RunLines(start[0], start[1], end[0], end[1]))
    if not ends or ends[0].n_lines < 2:
        return None
    return (crossed_ci(ends, n_resamples=BAND_RESAMPLES, seed=seed),
            crossed_ci(changes, n_resamples=BAND_RESAMPLES, seed=seed), len(ends))


def crossed_band(group: RunGroup, set_name: str, statistic: str, seed: int = 0) -> Band | None:
    """The group's crossed CI at every eval step its seeds have per-line scores for (None: no step has).

    statistic "change": the mean over seeds of the log ratio vs each seed's step 0 (drift for
    enRuler), as a relative change in %. "ppl": the mean over seeds of log perplexity, in ppl, its
    band the change's CI around it (mean * exp(change CI - change mean)): paired with step 0 on the
    same lines, so which lines the set holds (shared by every configuration on the plot, and most
    of an absolute perplexity's CI) does not widen it; at step 0 it is a point."""
    steps = sorted({e.step for run in group.runs for e in run.evals})
    starts = [_lines(run, 0, set_name) for run in group.runs]
    out: list[tuple[int, float, float, float, int]] = []
    for step in steps:
        found = _crossed_at(group, step, set_name, starts, seed)
        if found is None:
            continue
        level, change, n = found
        if statistic == "change":
            out.append((step, math.expm1(change.mean) * 100, math.expm1(change.lo) * 100, math.expm1(change.hi) * 100, n))
        else:
            mean = math.exp(level.mean)
            out.append((step, mean, mean * math.exp(change.lo - change.mean), mean * math.exp(change.hi - change.mean), n))
    if not out:
        return None
    steps_, mean, lo, hi, n = zip(*out)
    return Band(tuple(steps_), tuple(mean), tuple(lo), tuple(hi), tuple(n))

"""Answers right over seeds, per configuration: for every eval set whose pairs carry answers (the
daemon scores each at every eval: events' `answers.<SET>.correct`, "1"/"0" per item in file order),
the rate at step 0 and at each member's last eval, crossed over seeds x pairs (evals/exact.py
crossed_rate), and the change end - start per (seed, pair), crossed_mean: "learned" only where its
CI is above zero.

A configuration has a set's answers only where every member has them at step 0 and at its end over
the same number of items (an interpolated member runs no evals: its configuration has none). A
set without answers is absent, never 0.

Between configurations (PairedAnswers): each configuration minus the baseline at the comparison
point (the common step, or equal SFT tokens: the ConfigResult's common_step; like with like), paired
by seed and pair (evals/exact.py paired_difference: the crossed CI over seeds x pairs of the
per-(seed, pair) difference of right/wrong). And the values a rule's conditions name
(`SET_exact_change[_lo|_hi]`: each configuration's change vs its own step 0, at its end and at
the common step: answer_metrics).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tatu.daemon.run.view import read_run
from tatu.formats import fmt_interval, fmt_share
from tatu.evals.exact import crossed_mean, crossed_rate, paired_difference
from tatu.sweep.judge.common_step import compared_at
from tatu.sweep.judge.records import ConfigResult


@dataclass(frozen=True)
class Share:
    """A share of answers right, or a difference of two such (in points), with its 95% interval."""

    value: float
    lo: float
    hi: float

    def to_json(self) -> dict:
        return {"value": self.value, "lo": self.lo, "hi": self.hi}

    def text(self) -> str:
        """A share as every table and sentence writes it: `12.5% [4.2%,31.0%]`."""
        return f"{fmt_share(self.value)} {fmt_interval(self.lo, self.hi, fmt_share)}"

    @classmethod
    def from_json(cls, payload: dict) -> Share:
        return cls(payload["value"], payload["lo"], payload["hi"])


@dataclass(frozen=True)
class ConfigAnswers:
    """One configuration's answers right on one set over seeds x pairs: the rate at step 0 and at
    the members' ends (each a rate with its interval), the change end - start (a difference of
    rates, with its crossed t interval and p), the members' end steps."""

    config: str
    set_name: str
    start: Share
    end: Share
    change: Share
    p_value: float
    n_seeds: int
    n_items: int
    end_steps: tuple[int, ...]

    @property
    def learned(self) -> bool:
        """More answers right at the end, the change's CI above zero."""
        return self.change.lo > 0

    def to_json(self) -> dict:
        return {"config": self.config, "set": self.set_name, "n_seeds": self.n_seeds, "n_items": self.n_items,
                "end_steps": list(self.end_steps), "p_value": self.p_value,
                "start": self.start.to_json(), "end": self.end.to_json(), "change": self.change.to_json()}

    @classmethod
    def from_json(cls, payload: dict) -> ConfigAnswers:
        return cls(payload["config"], payload["set"], Share.from_json(payload["start"]), Share.from_json(payload["end"]),
                   Share.from_json(payload["change"]),
                   payload["p_value"], payload["n_seeds"], payload["n_items"], tuple(payload["end_steps"]))


def _bits(text: str) -> list[float]:
    return [1.0 if c == "1" else 0.0 for c in text]


def member_answers(run_dir: Path, step: int | None = None) -> tuple[int, dict[str, tuple[list[float], list[float]]]]:
    """(the eval step read, {set: (step 0's right/wrong, that eval's)}) of one run's events: its last
    eval, or the one at `step`; {} without a step-0 eval or an eval at `step`."""
    records = read_run(run_dir).evals
    first = next((r for r in records if r.step == 0), None)
    at = [r for r in records if step is None or r.step == step]
    if first is None or not at:
        return 0, {}
    last = at[-1]  # a re-run eval repeats the same numbers: the last is the run's end
    return last.step, {name: (_bits(a.correct), _bits(last.answers[name].correct))
                       for name, a in first.answers.items() if name in last.answers}


def _members(config: ConfigResult, run_dirs: dict[str, Path]) -> list:
    """The members whose answers count (finished daemon runs, in seed order); [] where some member
    has none to give (an interpolated one, or one not run here)."""
    members = sorted((r for r in config.results if r.state in ("done", "aborted")), key=lambda r: r.seed)
    return [] if any(r.interpolated or r.member not in run_dirs for r in members) else members


def _read(config: ConfigResult, run_dirs: dict[str, Path], common: bool) -> dict[int, tuple[int, dict]]:
    """{seed: member_answers} at the members' ends, or at the configuration's common step."""
    step = config.common_step if common else None
    if common and step is None:
        return {}
    return {r.seed: member_answers(run_dirs[r.member], step) for r in _members(config, run_dirs)}


def config_answers(configs: list[ConfigResult], run_dirs: dict[str, Path], common: bool = False
                   ) -> tuple[ConfigAnswers, ...]:
    """Every configuration's answers right per set (module doc), in the configurations' order: at the
    members' ends, or (`common`) at each configuration's common step."""
    out = []
    for config in configs:
        read = list(_read(config, run_dirs, common).values())
        if not read:
            continue
        for name in read[0][1]:
            pairs = [answers.get(name) for _, answers in read]
            if any(p is None or len(p[0]) != len(pairs[0][0]) or len(p[1]) != len(p[0]) for p in pairs):
                continue
            start, end = [p[0] for p in pairs], [p[1] for p in pairs]
            if len(start[0]) < 2:
                continue  # a crossed CI needs two items
            before, after = crossed_rate(start), crossed_rate(end)
            change = crossed_mean([[e - s for s, e in zip(a, b)] for a, b in zip(start, end)])
            out.append(ConfigAnswers(config.key, name, Share(before.value, before.lo, before.hi),
                                     Share(after.value, after.lo, after.hi),
                                     Share(change.mean, change.lo, change.hi), change.p_value,
                                     len(pairs), len(start[0]), tuple(sorted({step for step, _ in read}))))
    return tuple(out)


@dataclass(frozen=True)
class PairedAnswers:
    """A configuration minus the baseline on one set's answers right, paired by seed and pair at the
    comparison point (`at`: "step 8", or "equal SFT tokens: 12,288 (steps 16 vs 8)"): the difference
    in share right (points) with its crossed CI over seeds x pairs and its p."""

    config: str
    baseline: str
    set_name: str
    at: str
    diff: Share
    p_value: float
    n_seeds: int
    n_items: int

    def to_json(self) -> dict:
        return {"config": self.config, "baseline": self.baseline, "set": self.set_name, "at": self.at,
                "diff": self.diff.to_json(), "p_value": self.p_value, "n_seeds": self.n_seeds, "n_items": self.n_items}

    @classmethod
    def from_json(cls, payload: dict) -> PairedAnswers:
        return cls(payload["config"], payload["baseline"], payload["set"], payload["at"], Share.from_json(payload["diff"]),
                   payload["p_value"], payload["n_seeds"], payload["n_items"])


def _at(config: ConfigResult, baseline: ConfigResult) -> str:
    """Where the two are compared, as the perplexity comparisons say it (common_step.compared_at)."""
    return compared_at(config, baseline, common=True).text()


def paired_answers(configs: list[ConfigResult], run_dirs: dict[str, Path]) -> tuple[PairedAnswers, ...]:
    """Each configuration vs the baseline on every set both have answers for, at the common step,
    paired by seed (the seeds both ran) and pair; none without a baseline or two shared seeds."""
    baseline = next((c for c in configs if c.is_baseline), None)
    if baseline is None:
        return ()
    base = _read(baseline, run_dirs, common=True)
    out = []
    for config in configs:
        if config is baseline:
            continue
        mine = _read(config, run_dirs, common=True)
        seeds = sorted(set(mine) & set(base))
        if len(seeds) < 2:
            continue
        for name in mine[seeds[0]][1]:
            rows = [(mine[s][1].get(name), base[s][1].get(name)) for s in seeds]
            if any(a is None or b is None or len(a[1]) != len(rows[0][0][1]) or len(b[1]) != len(a[1])
                   for a, b in rows):
                continue
            ci = paired_difference([a[1] for a, _ in rows], [b[1] for _, b in rows])
            out.append(PairedAnswers(config.key, baseline.key, name, _at(config, baseline),
                                     Share(ci.mean, ci.lo, ci.hi), ci.p_value, len(seeds), len(rows[0][0][1])))
    return tuple(out)


def answer_metrics(answers: tuple[ConfigAnswers, ...]) -> dict[str, dict[str, float]]:
    """{config: {"SET_exact_change": .., "_lo", "_hi"}}: the values a rule names, per configuration
    (its change in share right vs its own step 0, over seeds x pairs)."""
    out: dict[str, dict[str, float]] = {}
    for a in answers:
        out.setdefault(a.config, {}).update({f"{a.set_name}_exact_change": a.change.value,
                                             f"{a.set_name}_exact_change_lo": a.change.lo,
                                             f"{a.set_name}_exact_change_hi": a.change.hi})
    return out

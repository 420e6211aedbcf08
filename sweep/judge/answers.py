"""Answers right over seeds, per configuration: for every eval set whose pairs carry answers (the
daemon scores each at every eval: events' `answers.<SET>.correct`, "1"/"0" per item in file order),
the rate at step 0 and at each member's last eval, crossed over seeds x pairs (evals/exact.py
crossed_rate), and the change end - start per (seed, pair), crossed_mean: "learned" only where its
CI is above zero.

A configuration has a set's answers only where every member has them at step 0 and at its end over
the same number of items (an interpolated member runs no evals: its configuration has none). A
set without answers is absent, never 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tatu.daemon.run.paths import RunDir
from tatu.evals.exact import crossed_mean, crossed_rate
from tatu.sweep.judge.records import ConfigResult


@dataclass(frozen=True)
class Share:
    """A share of answers right, or a difference of two such (in points), with its 95% interval."""

    value: float
    lo: float
    hi: float

    def to_json(self) -> dict:
        return {"value": self.value, "lo": self.lo, "hi": self.hi}

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


def member_answers(run_dir: Path) -> tuple[int, dict[str, tuple[list[float], list[float]]]]:
    """(last eval step, {set: (step 0's right/wrong, the last eval's)}) of one run's events; {}
    without a step-0 eval."""
    records = RunDir(run_dir).eval_records()
    first = next((r for r in records if r.step == 0), None)
    if first is None or not records:
        return 0, {}
    last = records[-1]  # a re-run eval repeats the same numbers: the last is the run's end
    return last.step, {name: (_bits(a.correct), _bits(last.answers[name].correct))
                       for name, a in first.answers.items() if name in last.answers}


def config_answers(configs: list[ConfigResult], run_dirs: dict[str, Path]) -> tuple[ConfigAnswers, ...]:
    """Every configuration's answers right per set (module doc), in the configurations' order."""
    out = []
    for config in configs:
        members = [r for r in config.results if r.state in ("done", "aborted")]
        if not members or any(r.interpolated or r.member not in run_dirs for r in members):
            continue
        read = [member_answers(run_dirs[r.member]) for r in members]
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

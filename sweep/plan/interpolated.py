"""Interpolated members of a sweep (WiSE-FT inside the comparison): `[interpolate]` in a plan

    [interpolate]
    config = "full-replay6"     # a configuration key of the plan (a named one, or an axis plan's replay-n6)
    alphas = [0.5]

makes each (config, alpha) a configuration of its own (`full-replay6-a0.5`) with one member per
seed: theta = (1 - alpha) theta_seed + alpha theta_end of that seed's member of `config`
(model/interpolation.py: float64, rounded once, the tied embedding one tensor), written once,
atomically, as an ordinary checkpoint in sweeps/<name>/interpolated/<key>-s<seed>/ when its parent
has a result. It runs no daemon: its state is its parent's (an aborted parent's end is its state/,
as for every aborted member, and the interpolated member counts as aborted too), it has no evals
during training (no every_eval_drift, no common-step lines: a rule naming them leaves it unjudged,
said so) and is re-scored, start and end, on the CPU (sweep/judge/scores.py: no daemon evaluated it), so the report pairs it by
seed and line with the baseline.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tatu.sweep.plan.member import Member
from tatu.sweep.plan.interpolate import InterpolateSpec, interpolated_key
from tatu.sweep.plan.rule import CONFIG

FOLDER = "interpolated"


@dataclass(frozen=True)
class InterpolatedMember:
    """One seed of an interpolated configuration: its parent member and alpha."""
    parent: Member
    alpha: float
    config_key: str  # full-replay6-a0.5

    @property
    def name(self) -> str:
        return f"{self.config_key}-s{self.parent.seed}"

    @property
    def seed(self) -> int:
        return self.parent.seed

    @property
    def env(self) -> dict:
        """The parent's: its data, lines, seed checkpoint and the thresholds a rule reads."""
        return self.parent.env

    @property
    def values(self) -> dict:
        """The parent's values; its configuration is its own key (`first config` orders by it)."""
        return {**self.parent.values, CONFIG: self.config_key}

    def directory(self, sweep_dir: Path) -> Path:
        return Path(sweep_dir) / FOLDER / self.name


def interpolated_members(spec: InterpolateSpec | None, compare: list[Member]) -> list[InterpolatedMember]:
    """Per alpha, per seed: the members the locked [interpolate] (`spec`) defines (none without it)."""
    if spec is None:
        return []
    parents = [m for m in compare if m.config_key == spec.config]
    return [InterpolatedMember(p, a, interpolated_key(spec.config, a)) for a in spec.alphas for p in parents]

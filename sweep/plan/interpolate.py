"""A plan's `[interpolate]` section as pre-registered: which configuration and which alphas
(what the members are and how they are scored: tatu.sweep.plan.interpolated). In the plan's hash and
lock only when the plan has it, so a plan without it hashes as before."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tatu.sweep.plan.rule import plan_error

EXAMPLE = '[interpolate] config = "full-replay6", alphas = [0.5]'


@dataclass(frozen=True)
class InterpolateSpec:
    """What the plan's [interpolate] pre-registers (in its hash and lock only when present)."""
    config: str
    alphas: tuple[float, ...]

    def keys(self) -> list[str]:
        return [interpolated_key(self.config, a) for a in self.alphas]

    def to_json(self) -> dict:
        return {"config": self.config, "alphas": list(self.alphas)}

    @classmethod
    def from_json(cls, doc: dict | None) -> "InterpolateSpec | None":
        return None if not doc else cls(doc["config"], tuple(float(a) for a in doc["alphas"]))


def interpolated_key(config: str, alpha: float) -> str:
    return f"{config}-a{alpha:g}"


def read_interpolate(section: dict | None, path: Path, keys: list[str]) -> InterpolateSpec | None:
    """[interpolate] checked: `keys` are the plan's configuration keys. Every problem is 78 naming
    the file and the key."""
    if section is None:
        return None
    unknown = sorted(set(section) - {"config", "alphas"})
    if unknown:
        raise plan_error(path, f"[interpolate] {unknown[0]}", "unknown key (known: alphas, config)")
    config = section.get("config")
    if not isinstance(config, str) or config not in keys:
        raise plan_error(path, "[interpolate] config", f"{config!r} is not a configuration of the plan "
                                                       f"({', '.join(keys)}); e.g. {EXAMPLE}")
    alphas = section.get("alphas")
    if not isinstance(alphas, list) or not alphas:
        raise plan_error(path, "[interpolate] alphas", f"expected a non-empty list of numbers in [0, 1], e.g. {EXAMPLE}")
    for alpha in alphas:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or not 0 <= alpha <= 1:
            raise plan_error(path, "[interpolate] alphas", f"{alpha!r} is not a number in [0, 1] "
                                                           "(0 is the seed, 1 the configuration's own end)")
    spec = InterpolateSpec(config, tuple(float(a) for a in alphas))
    if len(set(spec.keys())) != len(alphas):
        raise plan_error(path, "[interpolate] alphas", f"repeated alphas in {alphas}")
    taken = [k for k in spec.keys() if k in keys]
    if taken:
        raise plan_error(path, "[interpolate] alphas", f"{taken[0]} is already a configuration of the plan")
    return spec

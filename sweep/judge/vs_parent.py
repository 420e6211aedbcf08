"""Each interpolated configuration against its own parent, paired by seed and line: WiSE-FT's
question (how much of the fine-tune's gain does the walk back keep, how much of its forgetting and
held-out damage does it take back), which the pairing with the baseline does not answer.

Per alpha: the enRuler (drift), sftHeld and every held-out set's paired log-ratio difference,
config's end vs its parent's end on the same seeds and lines, with the crossed seeds x lines CI of
every other paired comparison (sweep/judge/stats.py paired_stats) and Holm over the alphas, per set.
Like with like by construction: each alpha's member is its parent seed's own end walked back, so each
pair sets one step against the same step (`steps`, checked per seed: common_step.seedwise_steps); a
pair that is not (never, unless the files changed under the report) leaves the row out of the
Holm family, with no p.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tatu.sweep.plan.interpolate import InterpolateSpec
from tatu.sweep.judge.common_step import seedwise_steps
from tatu.sweep.judge.records import ConfigResult, PairedDiff, holm_adjusted, paired_of
from tatu.sweep.judge.stats import paired_stats

# The set each metric reads: drift is enRuler's; a held-out set is its own name.
SETS = {"drift": "enRuler", "sftHeld": "sftHeld"}
INDEX_OFFSET = 500  # bootstrap streams apart from the baseline comparisons' (index 0..)


@dataclass(frozen=True)
class VsParent:
    """An interpolated configuration against its own parent, paired by seed and line: per metric the
    difference, Holm over the alphas (None: not compared); `steps`: the steps its seeds' pairs are
    compared at, each pair at one (None: some pair is not, or a report written before steps were kept)."""

    config: str
    parent: str
    alpha: float
    paired: dict[str, PairedDiff | None]
    steps: tuple[int, ...] | None = None

    def to_json(self) -> dict:
        return {"config": self.config, "parent": self.parent, "alpha": self.alpha,
                "paired": {k: v and v.to_json() for k, v in self.paired.items()},
                "steps": None if self.steps is None else list(self.steps)}

    @classmethod
    def from_json(cls, payload: dict) -> VsParent:
        steps = payload.get("steps")
        return cls(payload["config"], payload["parent"], payload["alpha"], paired_of(payload["paired"]),
                   None if steps is None else tuple(steps))


def vs_parent(spec: InterpolateSpec | None, configs: list[ConfigResult]) -> tuple[VsParent, ...]:
    """One VsParent per interpolated configuration, in the plan's alpha order (`spec`: the locked
    [interpolate]; none without it)."""
    by_key = {c.key: c for c in configs}
    parent = by_key.get(spec.config) if spec else None
    if parent is None:
        return ()
    metrics = [*SETS, *(name for name in (parent.stats or {}) if name not in SETS)]
    rows = [{"config": key, "parent": spec.config, "alpha": alpha, "paired": {},
             "steps": seedwise_steps(by_key[key], parent)}
            for key, alpha in zip(spec.keys(), spec.alphas) if key in by_key]
    for metric in metrics:
        compared = []
        for index, row in enumerate(rows):
            config = by_key[row["config"]]
            paired = paired_stats(config.results, parent.results, SETS.get(metric, metric), config.half,
                                  INDEX_OFFSET + index)
            if paired and row["steps"] is None:
                paired = dataclasses.replace(paired, unequal="some seed's pair at unequal steps")
            elif paired and len(row["steps"]) == 1:
                paired = dataclasses.replace(paired, step=row["steps"][0])
            row["paired"][metric] = paired
            if paired and paired.unequal is None:
                compared.append(row)
        for row, adjusted in zip(compared, holm_adjusted([r["paired"][metric] for r in compared])):
            row["paired"][metric] = adjusted
    return tuple(VsParent(row["config"], row["parent"], row["alpha"], row["paired"], row["steps"]) for row in rows)

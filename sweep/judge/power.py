"""How many seeds are enough: per judged metric of each configuration (drift, the sftHeld change,
every held-out set the rule names) and per paired comparison with the baseline, the seeds whose
crossed CI (seeds x lines) would resolve the plan's stated effect at 80% power, projected from
the variance parts measured on the members (evals/seeds/power.py: seeds_needed, the one home of the
formula). Where the rule judges: at the end, or at the common step.

The stated effect is the plan's `[decision] mde` (a relative change of perplexity, "2%" = a ratio
of 1.02), DEFAULT_MDE when the plan leaves it out; on the log scale it is log1p(mde)."""
from __future__ import annotations

import dataclasses
import math

from tatu.evals.seeds import power as seeds_power
from tatu.sweep.plan.rule import Rule, held_out_set
from tatu.sweep.judge.records import ConfigResult, ConfigStat, PairedDiff

DEFAULT_MDE = 0.02  # docs/sweeps.md#how-many-seeds-are-enough
# the paired comparisons the report makes (sweep/judge/analysis.py add_paired): drift and sftHeld
PAIRED = ("drift", "sftHeld")


@dataclasses.dataclass(frozen=True)
class SeedsFor:
    """One metric of one configuration (or its difference with the baseline): what its seeds
    resolve now and how many would resolve the stated effect."""

    config: str
    vs: str | None        # the baseline's key for a paired comparison, None for the configuration's own change
    metric: str           # drift | sftHeld | a held-out set's name
    n_seeds: int
    n_lines: int | None
    mde_now: float | None  # relative: what the CI of n_seeds resolves at 80% power
    seeds: int | None     # seeds for the stated effect; None: no number of seeds with these lines (or unknown)
    line_floor: float | None  # relative: what the shared lines alone allow (at any seed count)
    known: bool           # False below 2 seeds: the seed part is not measured


def stated_effect(mde: float | None) -> float:
    """The plan's `[decision] mde` as locked, else the default (a relative change)."""
    return mde or DEFAULT_MDE


def _seeds_for(config: str, vs: str | None, metric: str, stats: ConfigStat | PairedDiff | None, effect: float
               ) -> SeedsFor | None:
    if not stats:
        return None
    parts = stats.parts
    if parts is None:
        return SeedsFor(config, vs, metric, stats.n_seeds, None, None, None, None, known=False)
    return SeedsFor(config, vs, metric, stats.n_seeds, parts.n_lines, math.expm1(seeds_power.crossed_mde(parts, stats.n_seeds)),
                    seeds_power.seeds_needed(parts, math.log1p(effect)), math.expm1(seeds_power.line_floor(parts)), known=True)


def judged_sets(rule: Rule) -> list[str]:
    """drift, sftHeld and every held-out set the rule's conditions name, in that order."""
    return ["drift", "sftHeld", *dict.fromkeys(n for n in (held_out_set(c.metric) for c in rule.conditions) if n)]


@dataclasses.dataclass(frozen=True)
class SeedsForEffect:
    """The report's seeds-for block: the stated effect, the power, where the rule judges (`at`: "end"
    or "common") and a row per judged metric of each configuration, then per comparison."""

    effect: float
    power: float
    at: str
    rows: tuple[SeedsFor, ...]

    def to_json(self) -> dict:
        return {"effect": self.effect, "power": self.power, "at": self.at,
                "rows": [dataclasses.asdict(r) for r in self.rows]}

    @classmethod
    def from_json(cls, payload: dict) -> SeedsForEffect:
        return cls(payload["effect"], payload["power"], payload["at"], tuple(SeedsFor(**r) for r in payload["rows"]))


def seeds_for_effect(rule: Rule, configs: list[ConfigResult], effect: float) -> SeedsForEffect:
    """Rows per configuration (its judged metrics), then per comparison with the baseline, at the
    step the rule judges."""
    common = rule.at == "common"
    baseline = next((c.key for c in configs if c.is_baseline), None)
    rows = []
    for config in configs:
        for metric in judged_sets(rule):
            rows.append(_seeds_for(config.key, None, metric, (config.stats_at(common) or {}).get(metric), effect))
    for config in configs:
        if not config.is_baseline:
            for metric in PAIRED:
                paired = (config.paired_at(common) or {}).get(metric)
                # a difference at unequal ends tests nothing: no seeds make it resolve anything
                rows.append(_seeds_for(config.key, baseline, metric, None if paired and paired.unequal else paired, effect))
    return SeedsForEffect(effect, seeds_power.POWER, rule.at, tuple(r for r in rows if r is not None))

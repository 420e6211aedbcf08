"""The sweep's results as records (the convention of tatu/records.py): a configuration's change
over seeds (ConfigStat, relative), a paired difference between two configurations (PairedDiff, on
the log scale the crossed model estimates), a member's result (MemberResult), a configuration's
(ConfigResult), the rule's verdict (SweepVerdict, RuleCheck). Each writes the keys report.json held
before the records existed (so every reader of an old report.json, and every diff between two,
still works); the report itself is sweep/judge/sweep_report.py's SweepReport.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from tatu.evals.seeds.power import CrossedParts
from tatu.evals.seeds.stats import SeedCI, holm
from tatu.records import LogRatio, RelativeChange


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _present(record, *names: str) -> dict:
    """The named fields of `record` that are set (not None): keys a report holds only where they apply,
    so a report written before them keeps its bytes."""
    return {name: getattr(record, name) for name in names if getattr(record, name) is not None}


def _parts_json(parts: CrossedParts | None) -> dict | None:
    return None if parts is None else dataclasses.asdict(parts)


def _parts_of(payload: dict | None) -> CrossedParts | None:
    return None if payload is None else CrossedParts(**payload)


@dataclass(frozen=True)
class Outlier:
    """A seed whose estimate is far from the others' (leave-one-out t): flagged, never dropped."""

    seed: int
    t: float


@dataclass(frozen=True)
class ConfigStat:
    """One configuration's change on one set over its seeds: the crossed CI (seeds x lines,
    evals/seeds/stats.py SeedCI) shown as a relative change, and where its variance comes from.

    log_mean and se are on the log scale; seed_sd, seed_effect_sd, within_se, shared_line_se and
    interaction_se too (SeedCI's own); mde is relative (None below 2 seeds: not measured);
    df is None where it is infinite; per_seed: each seed's relative change, by str(seed); line_skew:
    the skewness of its per-line changes averaged over seeds (SeedCI.line_skew: what is set beside the
    range the one-sided bounds were measured on, evals/seeds/guarantee.py). It is not kept in report.json
    (the verdict's note it gives is, SweepVerdict.notes), so it reads back as 0 and is not compared."""

    change: RelativeChange
    log_mean: float
    se: float
    seed_sd: float
    seed_effect_sd: float
    within_se: float
    shared_line_se: float
    interaction_se: float
    df: float | None
    n_seeds: int
    mde: float | None
    parts: CrossedParts | None
    per_seed: dict[str, float]
    outliers: tuple[Outlier, ...]
    line_skew: float = dataclasses.field(default=0.0, compare=False)

    @classmethod
    def of(cls, ci: SeedCI, per_seed: dict[str, float], outliers: tuple[Outlier, ...]) -> ConfigStat:
        return cls(change=RelativeChange(math.expm1(ci.mean), math.expm1(ci.lo), math.expm1(ci.hi)),
                   log_mean=ci.mean, se=ci.se, seed_sd=ci.seed_sd, seed_effect_sd=ci.seed_effect_sd,
                   within_se=ci.within_se, shared_line_se=ci.shared_line_se, interaction_se=ci.interaction_se,
                   df=_finite_or_none(ci.df), n_seeds=ci.n_seeds,
                   mde=math.expm1(ci.mde) if math.isfinite(ci.mde) else None, parts=ci.parts,
                   per_seed=per_seed, outliers=outliers, line_skew=ci.line_skew)

    def to_json(self) -> dict:
        return {"value": self.change.value, "lo": self.change.lo, "hi": self.change.hi, "log_mean": self.log_mean,
                "se": self.se, "seed_sd": self.seed_sd, "seed_effect_sd": self.seed_effect_sd,
                "within_se": self.within_se, "shared_line_se": self.shared_line_se,
                "interaction_se": self.interaction_se, "df": self.df, "n_seeds": self.n_seeds, "mde": self.mde,
                "parts": _parts_json(self.parts), "per_seed": dict(self.per_seed),
                "outliers": [{"seed": o.seed, "t": o.t} for o in self.outliers]}

    @classmethod
    def from_json(cls, payload: dict) -> ConfigStat:
        return cls(change=RelativeChange(payload["value"], payload["lo"], payload["hi"]),
                   log_mean=payload["log_mean"], se=payload["se"], seed_sd=payload["seed_sd"],
                   seed_effect_sd=payload["seed_effect_sd"], within_se=payload["within_se"],
                   shared_line_se=payload["shared_line_se"], interaction_se=payload["interaction_se"],
                   df=payload["df"], n_seeds=payload["n_seeds"], mde=payload["mde"],
                   parts=_parts_of(payload["parts"]), per_seed=dict(payload["per_seed"]),
                   outliers=tuple(Outlier(o["seed"], o["t"]) for o in payload["outliers"]))


@dataclass(frozen=True)
class PairedDiff:
    """One configuration minus another, paired by seed and line: the crossed CI of the log-ratio
    difference (shown as a relative change through `change.relative()`), its p from the same SE and
    df, t = mean / SE (None at SE 0), the SD of the per-seed differences and the relative MDE.
    p_holm and n_compared: Holm's adjustment over the comparisons made together (None until made).
    `step`: the step both sides were compared at (the common step, or the ends where every member of
    both ended at one step); `unequal`: both ends and why where they differ ("24 vs 8 (aborted at 8)"):
    such a difference sets unequal training side by side, so it is in no Holm family and has no
    direction (sweep/judge/common_step.py compared_at). Both None in a report written before them."""

    change: LogRatio
    p_value: float
    t: float | None
    df: float | None
    n_seeds: int
    seed_sd: float
    mde: float
    parts: CrossedParts | None
    p_holm: float | None = None
    n_compared: int | None = None
    step: int | None = None
    unequal: str | None = None
    at: str | None = None  # at equal SFT tokens, each side at its own step: "equal SFT tokens: 12,288 (steps 16 vs 8)"

    def to_json(self) -> dict:
        out = {"diff": self.change.value, "lo": self.change.lo, "hi": self.change.hi, "p_value": self.p_value,
               "t": self.t, "df": self.df, "n_seeds": self.n_seeds, "seed_sd": self.seed_sd, "mde": self.mde,
               "parts": _parts_json(self.parts)}
        # before Holm's adjustment and the common step a report held no such keys, and still holds none
        return {**out, **_present(self, "p_holm", "n_compared", "step", "unequal", "at")}

    @classmethod
    def from_json(cls, payload: dict) -> PairedDiff:
        return cls(change=LogRatio(payload["diff"], payload["lo"], payload["hi"]), p_value=payload["p_value"],
                   t=payload["t"], df=payload["df"], n_seeds=payload["n_seeds"], seed_sd=payload["seed_sd"],
                   mde=payload["mde"], parts=_parts_of(payload["parts"]), p_holm=payload.get("p_holm"),
                   n_compared=payload.get("n_compared"), step=payload.get("step"), unequal=payload.get("unequal"),
                   at=payload.get("at"))


def holm_adjusted(found: list[PairedDiff]) -> list[PairedDiff]:
    """The comparisons made together, each with its Holm-adjusted p and their count."""
    adjusted = holm([p.p_value for p in found]) if found else []
    return [dataclasses.replace(p, p_holm=a, n_compared=len(found)) for p, a in zip(found, adjusted)]


@dataclass(frozen=True)
class EvalDrifts:
    """A daemon run's drift as its own evals measured it (an interpolated member has none): the worst
    value and upper bound over its evals after step 0, the last eval's value (None without one), and
    (step, value, hi) at each eval."""

    every_eval_drift: float
    every_eval_drift_hi: float
    daemon_drift: float | None
    eval_drifts: tuple[tuple[int, float, float], ...]


@dataclass(frozen=True)
class MemberResult:
    """One member of a sweep as the analysis sees it (sweep/judge/analysis.py member_result, or an
    interpolated one's, sweep/judge/interpolated.py): status, verdict and, once it has an end,
    its steps, what trained, its drift at its own evals and its per-line scores.

    `lines` holds the per-line scores by key: "base"/"end" (the daemon's lines at step 0 and
    at its last eval; an interpolated member's re-scored seed and checkpoint)
    and the common step's (sweep/judge/common_step.py START, AT_COMMON), each {set: scores}. They stay in
    the scores cache and are not in report.json: a result read back has none."""

    member: str  # its folder's name: a daemon run's NAME.MEMBER under runs/, an interpolated one's under interpolated/
    config: str
    seed: int
    values: dict[str, str]
    state: str
    verdict: str | None
    interpolated: bool = False
    alpha: float | None = None  # an interpolated member's: its walk from the seed (0) to its parent's end (1)
    parent: str | None = None
    steps: int | None = None  # the last eval step (an interpolated member: its parent's); None before an end
    trainable: str | None = None
    evals: EvalDrifts | None = None
    lines: dict[str, dict] = dataclasses.field(default_factory=dict, compare=False)

    def has(self, key: str) -> bool:
        """Whether it holds per-line scores under `key` ("end": it has a scored end)."""
        return key in self.lines

    def to_json(self) -> dict:
        out = {"member": self.member, "config": self.config, "seed": self.seed, "values": dict(self.values),
               "state": self.state, "verdict": self.verdict}
        if self.interpolated:
            out.update(interpolated=True, alpha=self.alpha, parent=self.parent)
        if self.steps is not None:
            out.update(trainable=self.trainable, steps=self.steps)
        if self.evals is not None:
            out.update(every_eval_drift=self.evals.every_eval_drift, every_eval_drift_hi=self.evals.every_eval_drift_hi,
                       daemon_drift=self.evals.daemon_drift, eval_drifts=[list(e) for e in self.evals.eval_drifts])
        return out

    @classmethod
    def from_json(cls, payload: dict) -> MemberResult:
        evals = None
        if "every_eval_drift" in payload:
            evals = EvalDrifts(payload["every_eval_drift"], payload["every_eval_drift_hi"], payload["daemon_drift"],
                               tuple(tuple(e) for e in payload["eval_drifts"]))
        return cls(member=payload["member"], config=payload["config"], seed=payload["seed"],
                   values=dict(payload["values"]), state=payload["state"], verdict=payload["verdict"],
                   interpolated=bool(payload.get("interpolated")), alpha=payload.get("alpha"),
                   parent=payload.get("parent"), steps=payload.get("steps"), trainable=payload.get("trainable"),
                   evals=evals)


Stats = dict[str, ConfigStat | None]  # by set ("drift" is enRuler's, "sftHeld", each held-out set)


@dataclass(frozen=True)
class ConfigResult:
    """One configuration of a stage (sweep/judge/analysis.py stage_table): its members' results, its
    statistics over seeds at the members' ends and at the common step, the values a rule's
    conditions name (`metrics`, `metrics_common`: by metric name), and, in the comparison stage, its
    paired differences with the baseline (None: not compared, as the baseline itself) and whether it
    is the baseline (None: the stage has none)."""

    key: str
    values: dict[str, str]
    results: tuple[MemberResult, ...]
    stats: Stats | None
    categories: dict[str, Stats] | None
    stats_common: Stats | None
    categories_common: dict[str, Stats] | None
    common_step: int | None
    common_missing: str | None  # why there is no common-step comparison
    end_steps: tuple[int, ...]
    trainable: str | None
    effective: dict  # the effective config of its first member (daemon/config.py RunConfig.to_json)
    half: str | None  # the half of sftHeld's lines it is judged on (sweep/judge/stats.py HALVES); None: all
    metrics: dict[str, float] | None = None
    metrics_common: dict[str, float] | None = None
    paired: dict[str, PairedDiff | None] | None = None  # by metric: "drift", "sftHeld"
    paired_common: dict[str, PairedDiff | None] | None = None
    is_baseline: bool | None = None
    # SFT tokens seen at `common_step` where configurations differ in SFT tokens per step and are
    # compared at equal tokens (sweep/judge/common_step.py comparison_point); None: compared at one step
    common_tokens: int | None = None

    def stats_at(self, common: bool) -> Stats | None:
        return self.stats_common if common else self.stats

    def categories_at(self, common: bool) -> dict[str, Stats] | None:
        return self.categories_common if common else self.categories

    def paired_at(self, common: bool) -> dict[str, PairedDiff | None] | None:
        return self.paired_common if common else self.paired

    def without_lines(self) -> ConfigResult:
        """As the report keeps it: its members' per-line scores dropped (they stay in the scores cache)."""
        return dataclasses.replace(self, results=tuple(dataclasses.replace(r, lines={}) for r in self.results))

    def to_json(self) -> dict:
        out = {"key": self.key, "values": dict(self.values), "results": [r.to_json() for r in self.results],
               "stats": _stats_json(self.stats), "categories": _categories_json(self.categories),
               "stats_common": _stats_json(self.stats_common),
               "categories_common": _categories_json(self.categories_common), "common_step": self.common_step,
               "common_missing": self.common_missing, "end_steps": list(self.end_steps), "trainable": self.trainable,
               "effective": self.effective, "half": self.half, "metrics": self.metrics,
               "metrics_common": self.metrics_common}
        # keys a report held only where they applied (before the records existed), and still holds so
        for name in ("paired", "paired_common"):
            if getattr(self, name) is not None:
                out[name] = {k: v and v.to_json() for k, v in getattr(self, name).items()}
        return {**out, **_present(self, "is_baseline", "common_tokens")}

    @classmethod
    def from_json(cls, payload: dict) -> ConfigResult:
        return cls(key=payload["key"], values=dict(payload["values"]),
                   results=tuple(MemberResult.from_json(r) for r in payload["results"]),
                   stats=stats_of(payload["stats"]), categories=categories_of(payload["categories"]),
                   stats_common=stats_of(payload["stats_common"]),
                   categories_common=categories_of(payload["categories_common"]),
                   common_step=payload["common_step"], common_missing=payload["common_missing"],
                   end_steps=tuple(payload["end_steps"]), trainable=payload["trainable"],
                   effective=payload["effective"], half=payload["half"], metrics=payload["metrics"],
                   metrics_common=payload["metrics_common"], paired=paired_of(payload.get("paired")),
                   paired_common=paired_of(payload.get("paired_common")), is_baseline=payload.get("is_baseline"),
                   common_tokens=payload.get("common_tokens"))


def _stats_json(by_name: Stats | None) -> dict | None:
    return None if by_name is None else {k: v and v.to_json() for k, v in by_name.items()}


def _categories_json(by_set: dict[str, Stats] | None) -> dict | None:
    return None if by_set is None else {s: _stats_json(per) for s, per in by_set.items()}


@dataclass(frozen=True)
class FailedCondition:
    """A condition of the rule a configuration failed: its text, the value measured, the threshold
    it was held to (from the configuration's effective config) and the value as the verdict shows it."""

    condition: str
    measured: float
    threshold: float
    shown: str

    def to_json(self) -> dict:
        return {"condition": self.condition, "measured": self.measured, "threshold": self.threshold, "shown": self.shown}

    @classmethod
    def from_json(cls, payload: dict) -> FailedCondition:
        return cls(payload["condition"], payload["measured"], payload["threshold"], payload["shown"])


@dataclass(frozen=True)
class RuleCheck:
    """One configuration held to the rule (sweep/judge/analysis.py decide): its value of the rule's axis,
    the label the verdict names it by, the conditions it failed and the metrics it had no value for."""

    config: str
    value: str
    label: str
    failed: tuple[FailedCondition, ...]
    missing: tuple[str, ...]
    interpolated: bool

    @property
    def passes(self) -> bool:
        return not self.failed and not self.missing

    def to_json(self) -> dict:
        return {"config": self.config, "value": self.value, "label": self.label,
                "failed": [f.to_json() for f in self.failed], "missing": list(self.missing),
                "interpolated": self.interpolated}

    @classmethod
    def from_json(cls, payload: dict) -> RuleCheck:
        return cls(payload["config"], payload["value"], payload["label"],
                   tuple(FailedCondition.from_json(f) for f in payload["failed"]), tuple(payload["missing"]),
                   payload["interpolated"])


@dataclass(frozen=True)
class SweepVerdict:
    """The locked rule over the comparison stage: the value it chose (None: none satisfies it), the
    verdict line, every configuration's check in the order judged, what more seeds or lines could
    settle (`would_change`), where it judged (`at`: "end" or "common", at `at_step`) and whether
    every member had finished (`complete`: else the verdict is provisional)."""

    rule: str
    axis: str
    at: str
    at_step: int | None
    chosen: str | None
    line: str
    checks: tuple[RuleCheck, ...]
    would_change: tuple[str, ...]
    complete: bool = False
    looks: tuple[str, ...] = ()  # a sequential design's looks, a line each (sweep/judge/verdict.py)
    # a configuration whose per-line changes are more skewed than the range the error rates were
    # measured on, a line each beside the verdict (sweep/judge/verdict.skew_notes)
    notes: tuple[str, ...] = ()
    # at "common" where configurations train different SFT tokens per step: the SFT tokens each was
    # judged at, each at its own step (at_step then names none of them: None)
    at_tokens: int | None = None

    def judged_where(self) -> str:
        """` (judged at the end)`, ` (judged at step 8, the common step)` or ` (judged at equal SFT
        tokens: 65,536, each configuration at its own step)`: what the verdict line ends with."""
        if self.at != "common":
            return " (judged at the end)"
        if self.at_tokens is not None:
            return f" (judged at equal SFT tokens: {self.at_tokens:,}, each configuration at its own step)"
        return f" (judged at step {self.at_step}, the common step)"

    def to_json(self) -> dict:
        out = {"rule": self.rule, "axis": self.axis, "at": self.at, "at_step": self.at_step, "chosen": self.chosen,
               "line": self.line, "checks": [c.to_json() for c in self.checks],
               "would_change": list(self.would_change), "complete": self.complete}
        if self.looks:  # a fixed design's report has no such key
            out["looks"] = list(self.looks)
        if self.notes:
            out["notes"] = list(self.notes)
        return {**out, **_present(self, "at_tokens")}  # equal SFT tokens per step: no such key

    @classmethod
    def from_json(cls, payload: dict) -> SweepVerdict:
        return cls(payload["rule"], payload["axis"], payload["at"], payload["at_step"], payload["chosen"],
                   payload["line"], tuple(RuleCheck.from_json(c) for c in payload["checks"]),
                   tuple(payload["would_change"]), payload["complete"], tuple(payload.get("looks", ())),
                   tuple(payload.get("notes", ())), payload.get("at_tokens"))


def stats_of(by_name: dict | None) -> Stats | None:
    return None if by_name is None else {k: v and ConfigStat.from_json(v) for k, v in by_name.items()}


def paired_of(by_metric: dict | None) -> dict[str, PairedDiff | None] | None:
    return None if by_metric is None else {k: v and PairedDiff.from_json(v) for k, v in by_metric.items()}


def categories_of(by_set: dict | None) -> dict[str, Stats] | None:
    return None if by_set is None else {s: stats_of(per) for s, per in by_set.items()}

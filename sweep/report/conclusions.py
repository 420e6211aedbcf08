"""What a sweep concluded, in a form two sweeps of one plan can be compared by: the same plan run
on another CPU (another sum order) must reach the same conclusions even where its numbers differ.

A conclusion is the locked rule's verdict (which value it chose, and which configurations passed
it), and the direction of every judged change whose CI excludes zero: each configuration's drift
and sftHeld change over seeds, and each paired difference against the baseline (at the common
step where the report has it; one at unequal ends concludes nothing, sweep/report/ends.py); and every
other set's change over seeds (ptVal and the held-out sets: shown, never judged by the rule, but a
loss there is a conclusion too). A change whose CI
spans zero concludes nothing about its sign, so only the other sweep's CI excluding zero the other
way would contradict it.
"""
from __future__ import annotations

from dataclasses import dataclass

from tatu.formats import fmt_ci
from tatu.sweep.judge.sweep_report import SweepReport
from tatu.sweep.judge.common_step import like_with_like
from tatu.sweep.report.ends import baseline_of, end_text, equal_ends

JUDGED = ("drift", "sftHeld")


@dataclass(frozen=True)
class Interval:
    value: float
    lo: float
    hi: float

    @property
    def sign(self) -> int:
        """+1 or -1 where the CI excludes zero, else 0 (no direction concluded)."""
        return 1 if self.lo > 0 else -1 if self.hi < 0 else 0


@dataclass(frozen=True)
class Conclusions:
    chosen: str | None              # the value the locked rule chose (None: no value satisfies it)
    passed: tuple[str, ...]         # the configurations that passed every condition of the rule
    changes: dict[str, Interval]    # "replay-n6 drift", "replay-n6 - baseline sftHeld": judged changes


@dataclass(frozen=True)
class JudgedChange:
    """One judged change of a sweep report: a configuration's metric over seeds, or (paired) its
    difference from the baseline, paired by seed and line, as a relative change. A paired one is
    made at the common step where the report has it (`where`: "at step 8"); at the ends otherwise,
    and where those ends differ (`unequal`: "24 vs 8 (aborted at 8)") it concludes no direction."""

    config: str
    metric: str  # one of JUDGED, or another set's name (ptVal, a held-out set: its change vs step 0)
    paired: bool  # the difference from the baseline (else the configuration's own change vs step 0)
    interval: Interval
    where: str = ""  # a paired change's step: "at step 8" (the common step), "" at equal ends
    unequal: str | None = None  # both ends and why, where a paired change sets unequal training side by side

    @property
    def name(self) -> str:
        """The key Conclusions.changes holds it under: "replay-n6 drift", "replay-n6 - baseline sftHeld"."""
        return f"{self.config} - baseline {self.metric}" if self.paired else f"{self.config} {self.metric}"

    @property
    def sign(self) -> int:
        """The direction it concludes: none at unequal ends, whatever its CI."""
        return 0 if self.unequal else self.interval.sign


def _paired_change(config, baseline, metric: str) -> JudgedChange | None:
    """The paired difference like with like: at the common step, else at equal ends, else marked unequal."""
    paired, at_common = like_with_like(config, metric)
    if not paired:
        return None
    shown = paired.change.relative()  # log-ratio differences, shown as relative changes (the sign is the same)
    interval = Interval(shown.value, shown.lo, shown.hi)
    if at_common:
        where = f"at {paired.at}" if paired.at else f"at step {paired.step or config.common_step}"
        return JudgedChange(config.key, metric, True, interval, where=where)
    unequal = paired.unequal
    if paired.step is None and unequal is None:  # a report written before the analysis stored where it compared
        unequal = None if baseline is None or equal_ends(config, baseline) else f"{end_text(config)} vs {end_text(baseline)}"
    return JudgedChange(config.key, metric, True, interval, unequal=unequal)


def judged_changes(report: SweepReport) -> list[JudgedChange]:
    """Every judged change of a sweep report's data, in the report's configuration order."""
    changes = []
    baseline = baseline_of(report.compare.configs)
    for config in report.compare.configs:
        for metric in JUDGED:
            stats = (config.stats or {}).get(metric)
            if stats:
                changes.append(JudgedChange(config.key, metric, False,
                                            Interval(stats.change.value, stats.change.lo, stats.change.hi)))
            paired = _paired_change(config, baseline, metric)
            if paired:
                changes.append(paired)
        changes += other_set_changes(config)
    return changes


def other_set_changes(config) -> list[JudgedChange]:
    """A configuration's change over seeds on every set beyond drift and sftHeld (ptVal, the held-out
    sets), ptVal first and the rest by name (report.json stores sets sorted, so no dict order survives
    its round trip): never judged by the rule, concluded all the same."""
    stats = config.stats or {}
    return [JudgedChange(config.key, name, False, Interval(stats[name].change.value, stats[name].change.lo,
                                                            stats[name].change.hi))
            for name in sorted(stats, key=lambda name: (name != "ptVal", name)) if name not in JUDGED and stats[name]]


def conclusions(report: SweepReport) -> Conclusions:
    """From a sweep report (sweep/judge/analysis.py analyze, or report.json through sweep/judge/sweep_report.py
    read_report_json)."""
    verdict = report.verdict
    # a paired change at unequal ends concludes nothing: it is not a conclusion two sweeps can disagree on
    changes = {change.name: change.interval for change in judged_changes(report) if not change.unequal}
    passed = tuple(c.config for c in verdict.checks if c.passes)
    return Conclusions(verdict.chosen, passed, changes)


def disagreements(a: Conclusions, b: Conclusions) -> list[str]:
    """Where b contradicts a (and a, b): another verdict, another set of passing configurations, or
    a judged change whose CI excludes zero in one and lies on the other side of zero in the other."""
    out = []
    if a.chosen != b.chosen:
        out.append(f"the rule chose {a.chosen} in one and {b.chosen} in the other")
    if a.passed != b.passed:
        out.append(f"configurations passing the rule: {list(a.passed)} vs {list(b.passed)}")
    for name in sorted(set(a.changes) | set(b.changes)):
        x, y = a.changes.get(name), b.changes.get(name)
        if x is None or y is None:
            out.append(f"{name}: judged in one sweep only")
        elif (x.sign and x.sign * y.value <= 0) or (y.sign and y.sign * x.value <= 0):
            out.append(f"{name}: {fmt_ci(x.value, x.lo, x.hi)} vs {fmt_ci(y.value, y.lo, y.hi)}")
    return out

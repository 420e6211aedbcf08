"""What a sweep says, in sentences written from its report's data (report.json): one sentence
per conclusion of its conclusion set (sweep/report/conclusions.py), so the prose cannot disagree with
the numbers printed beside it, and no sentence claims a direction the CIs do not resolve.

    the verdict                  which value the locked rule chose (or that none satisfies it)
    the passing configurations   which configurations passed every condition, which failed and on what
    every judged change          a configuration's drift and sftHeld change over seeds, and its
    whose CI excludes zero       difference from the baseline paired by seed and line: its direction
                                 and its value with its CI (tatu/formats.py fmt_ci)

A paired difference is the one at the common step where the report has it ("at step 8"); one
at unequal ends (an aborted baseline) is listed with both ends and concludes no direction
(sweep/report/ends.py). A judged change whose CI spans zero concludes no direction: it is listed once, as not resolved,
with its CI and without a word of direction. Where the seeds run cannot resolve the plan's stated
effect on sftHeld (the learning ruler; sweep/judge/power.py's seeds-for rows), a last sentence says so and
why: the seeds it would take, or the shared lines' floor that no seed count goes under. Every number is the machine's own (another CPU sums
floats in another order); the conclusions are what tests/ops/test_demo_kernels.py holds equal
across kernels.
"""
from __future__ import annotations

from dataclasses import dataclass

from tatu.formats import fmt_ci
from tatu.sweep.judge.power import SeedsFor, SeedsForEffect
from tatu.sweep.judge.sweep_report import SweepReport
from tatu.sweep.report.conclusions import JudgedChange, conclusions, judged_changes

# The words of a direction, per metric: a rise in drift is forgetting, a fall in the sftHeld change is learning.
RISES = {"drift": "rose (the ruler's English got worse)", "sftHeld": "rose (the held-out pairs got worse)"}
FALLS = {"drift": "fell (the ruler's English got better)", "sftHeld": "fell (the held-out pairs were learned)"}
NAMES = {"drift": "enRuler drift", "sftHeld": "sftHeld change"}


@dataclass(frozen=True)
class Sentence:
    """One sentence of the paragraph and the conclusion it states ("verdict", "passed", a change's
    name as Conclusions.changes keys it, "unequal ends", "not resolved", or "learning not resolved")."""

    states: str
    text: str


def _ci(change: JudgedChange) -> str:
    i = change.interval
    return fmt_ci(i.value, i.lo, i.hi)


def _change_sentence(change: JudgedChange, baseline: str | None) -> str:
    sign = change.interval.sign
    if change.paired:
        compared = "lower" if sign < 0 else "higher"
        where = f" {change.where}" if change.where else ""
        return (f"{change.config} vs {baseline or 'the baseline'}{where}, paired by seed and line: {NAMES[change.metric]} "
                f"{compared}, {_ci(change)} over seeds x lines.")
    moved = FALLS[change.metric] if sign < 0 else RISES[change.metric]
    return f"{change.config}: {NAMES[change.metric]} {moved}, {_ci(change)} over seeds x lines vs step 0."


def what_it_says(report: SweepReport) -> list[Sentence]:
    """The paragraph, one Sentence per conclusion (module doc), from a sweep report's data."""
    found = conclusions(report)
    verdict = report.verdict
    axis = verdict.axis
    configs = report.compare.configs
    baseline = next((c.key for c in configs if c.is_baseline), None)
    out = [Sentence("verdict", f"The locked rule chose {axis}={found.chosen}." if found.chosen is not None
                    else "No value satisfies the locked rule.")]
    failed = [f"{c.config} ({'; '.join(f.condition + ' ' + f.shown for f in c.failed)})" for c in verdict.checks if c.failed]
    missing = [c.config for c in verdict.checks if c.missing and not c.failed]
    passed = ", ".join(found.passed) if found.passed else "none"
    out.append(Sentence("passed", f"Passing every condition of the rule: {passed}"
                        + (f"; failing: {', '.join(failed)}" if failed else "")
                        + (f"; not judged: {', '.join(missing)}" if missing else "") + "."))
    changes = judged_changes(report)  # what conclusions() keys found.changes by: the set the kernel test compares
    out += [Sentence(c.name, _change_sentence(c, baseline)) for c in changes if c.sign != 0]
    unequal = [c for c in changes if c.unequal]
    if unequal:  # unequal training side by side: shown with both ends, no direction whatever its CI
        listed = "; ".join(f"{c.config} vs {baseline or 'the baseline'} {NAMES[c.metric]} difference {_ci(c)} "
                           f"(steps {c.unequal})" for c in unequal)
        out.append(Sentence("unequal ends", f"Compared at unequal ends, so no direction is claimed: {listed}."))
    open_ = [c for c in changes if c.interval.sign == 0 and not c.unequal]
    if open_:
        listed = "; ".join(f"{c.config}{' vs ' + (baseline or 'the baseline') if c.paired else ''} "
                           f"{NAMES[c.metric]}{' difference' if c.paired else ''} {_ci(c)}" for c in open_)
        out.append(Sentence("not resolved", f"Not resolved (the CI spans zero, so no direction is claimed): {listed}."))
    learning = _learning_sentence(report.seeds_for)
    return out + ([learning] if learning else [])


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def _why(row: SeedsFor) -> str:
    """What resolving the stated effect would take, for one seeds-for row (sweep/judge/power.py SeedsFor)."""
    if not row.known:
        return f"its seed-to-seed spread is not measured at {row.n_seeds} seed"
    now = f"at {row.n_seeds} seeds it resolves {_pct(row.mde_now)}"
    if row.seeds is None:
        return (f"{now}, and no number of seeds would resolve less with these {row.n_lines} lines: the lines "
                f"shared by every seed alone allow {_pct(row.line_floor)} (more lines would)")
    return f"{now}: the spread from seed to seed needs {row.seeds} seeds"


def _learning_sentence(seeds_for: SeedsForEffect | None) -> Sentence | None:
    """Whether the report resolves learning (sftHeld) at the plan's stated effect, and if not why,
    from its seeds-for rows: a row is resolved when the seeds run are at least the seeds it needs."""
    if not seeds_for:
        return None
    rows = [r for r in seeds_for.rows if r.metric == "sftHeld"]
    short = [r for r in rows if not (r.known and r.seeds is not None and r.seeds <= r.n_seeds)]
    if not short:
        return None
    effect = f"{seeds_for.effect * 100:g}%"
    listed = "; ".join(f"{r.config}{' vs ' + r.vs if r.vs else ''} {'difference' if r.vs else 'change'}: "
                       f"{_why(r)}" for r in short)
    return Sentence("learning not resolved",
                    f"Learning (sftHeld) is not resolved at the plan's effect of {effect} "
                    f"({seeds_for.power:.0%} power, seeds x lines): {listed}. A learning claim here rests only on "
                    "a CI that excludes zero, above.")


def paragraph(report: SweepReport) -> str:
    """The sentences as one paragraph of text (the demo's closing output, the sweep page)."""
    return " ".join(s.text for s in what_it_says(report))

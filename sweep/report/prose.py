"""What a sweep says, in sentences written from its report's data (report.json): one sentence
per conclusion of its conclusion set (sweep/report/conclusions.py), so the prose cannot disagree with
the numbers printed beside it, and no sentence claims a direction the CIs do not resolve.

    the verdict                  which value the locked rule chose (or that none satisfies it)
    the passing configurations   which configurations passed every condition, which failed and on what
    every judged change          a configuration's drift, sftHeld, ptVal and held-out sets' change
    whose CI excludes zero       over seeds (the chosen configuration first), and its difference from
                                 the baseline paired by seed and line: its direction and its value
                                 with its CI (tatu/formats.py fmt_ci)
    worse everywhere             a set whose perplexity rose in every configuration, said once with
                                 each configuration's change ("Portuguese text got worse in every
                                 configuration: ptVal ...")

Perplexity is not answers: a fall in the sftHeld change says "perplexity fell", never "learned".
Answers right between configurations are said at the common step, paired by seed and pair, with a
direction only where the difference's CI excludes zero.

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
from tatu.sweep.judge.answers import ConfigAnswers, PairedAnswers, Share
from tatu.sweep.judge.power import SeedsFor, SeedsForEffect
from tatu.sweep.judge.sweep_report import SweepReport
from tatu.sweep.report.conclusions import JudgedChange, conclusions, judged_changes

# The words of a direction, per metric: a rise in drift is forgetting, a fall in the sftHeld change is learning.
RISES = {"drift": "rose (the ruler's English got worse)", "sftHeld": "rose (the held-out pairs' perplexity rose)"}
FALLS = {"drift": "fell (the ruler's English got better)", "sftHeld": "fell (the held-out pairs' perplexity fell)"}
NAMES = {"drift": "enRuler drift", "sftHeld": "sftHeld change"}
# what a set holds, for the sentence saying it got worse in every configuration
WHAT = {"drift": "The ruler's English", "sftHeld": "The held-out pairs", "ptVal": "Portuguese text"}


def _name(metric: str) -> str:
    return NAMES.get(metric, f"{metric} change")


def _moved(metric: str, sign: int) -> str:
    if metric in RISES:
        return FALLS[metric] if sign < 0 else RISES[metric]
    return "fell (its perplexity fell: better)" if sign < 0 else "rose (its perplexity rose: worse)"


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
        return (f"{change.config} vs {baseline or 'the baseline'}{where}, paired by seed and line: {_name(change.metric)} "
                f"{compared}, {_ci(change)} over seeds x lines.")
    return f"{change.config}: {_name(change.metric)} {_moved(change.metric, sign)}, {_ci(change)} over seeds x lines vs step 0."


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
    chosen = _chosen_config(report)
    # what conclusions() keys found.changes by (the set the kernel test compares), the chosen configuration first
    changes = sorted(judged_changes(report), key=lambda c: c.config != chosen)
    out += [Sentence(c.name, _change_sentence(c, baseline)) for c in changes if c.sign != 0]
    out += _worse_everywhere(changes, [c.key for c in configs], chosen)
    unequal = [c for c in changes if c.unequal]
    if unequal:  # unequal training side by side: shown with both ends, no direction whatever its CI
        listed = "; ".join(f"{c.config} vs {baseline or 'the baseline'} {_name(c.metric)} difference {_ci(c)} "
                           f"(steps {c.unequal})" for c in unequal)
        out.append(Sentence("unequal ends", f"Compared at unequal ends, so no direction is claimed: {listed}."))
    open_ = [c for c in changes if c.interval.sign == 0 and not c.unequal]
    if open_:
        listed = "; ".join(f"{c.config}{' vs ' + (baseline or 'the baseline') if c.paired else ''} "
                           f"{_name(c.metric)}{' difference' if c.paired else ''} {_ci(c)}" for c in open_)
        out.append(Sentence("not resolved", f"Not resolved (the CI spans zero, so no direction is claimed): {listed}."))
    out += _answers_sentences(report.answers, chosen)
    out += _paired_answers_sentences(report.answers_paired, chosen)
    learning = _learning_sentence(report.seeds_for)
    return out + ([learning] if learning else [])


def _share(share: Share) -> str:
    return share.text()


def _answers_sentences(answers: tuple[ConfigAnswers, ...], chosen: str | None) -> list[Sentence]:
    """Answers right per configuration and set, the chosen configuration first: "learned" only
    where the change's CI is above zero; where no configuration's answers rose, one sentence that
    the SFT taught the format (its perplexity), not the answers. No set with answers: nothing."""
    out = []
    for a in sorted(answers, key=lambda a: a.config != chosen):
        said = ("more answers right: learned" if a.learned else
                "fewer answers right" if a.change.hi < 0 else "no change resolved")
        out.append(Sentence(f"{a.config} {a.set_name} answers",
                            f"{a.config}: {a.set_name} answers right: {_share(a.start)} -> {_share(a.end)} over "
                            f"{a.n_seeds} seeds x {a.n_items} pairs, change {fmt_ci(a.change.value, a.change.lo, a.change.hi)} "
                            f"({said})."))
    if answers and not any(a.learned for a in answers):
        out.append(Sentence("answers not learned",
                            "No configuration answered more held-out pairs right (no change's CI is above zero): "
                            "the SFT taught the format, not the answers."))
    return out


def _paired_answers_sentences(paired: tuple[PairedAnswers, ...], chosen: str | None) -> list[Sentence]:
    """Each configuration vs the baseline on answers right, paired by seed and pair at the common
    step: a direction only where the difference's CI excludes zero."""
    out = []
    for a in sorted(paired, key=lambda a: a.config != chosen):
        said = ("more right" if a.diff.lo > 0 else "fewer right" if a.diff.hi < 0 else "no difference resolved")
        out.append(Sentence(f"{a.config} - baseline {a.set_name} answers",
                            f"{a.config} vs {a.baseline} at {a.at}, paired by seed and pair: {a.set_name} answers right "
                            f"{fmt_ci(a.diff.value, a.diff.lo, a.diff.hi)} over {a.n_seeds} seeds x {a.n_items} pairs "
                            f"({said})."))
    return out


def _chosen_config(report: SweepReport) -> str | None:
    """The configuration the rule chose (None: none chosen)."""
    verdict = report.verdict
    if verdict.chosen is None:
        return None
    checked = next((c.config for c in verdict.checks if c.value == verdict.chosen), None)
    return checked or next((c.key for c in report.compare.configs if c.values.get(verdict.axis) == verdict.chosen), None)


def _worse_everywhere(changes: list[JudgedChange], configs: list[str], chosen: str | None) -> list[Sentence]:
    """One sentence per set whose change vs step 0 rose, its CI above zero, in every configuration:
    each configuration's change, the chosen one first (a loss no configuration escaped)."""
    rose: dict[str, dict[str, JudgedChange]] = {}
    for c in changes:
        if not c.paired and c.interval.sign > 0:
            rose.setdefault(c.metric, {})[c.config] = c
    out = []
    for metric, by_config in rose.items():
        if len(configs) < 2 or set(by_config) != set(configs):
            continue  # one configuration's own sentence already says it
        listed = ", ".join(f"{_ci(by_config[k])} ({k}{', chosen' if k == chosen else ''})"
                           for k in sorted(configs, key=lambda k: k != chosen))
        what = WHAT.get(metric, f"The held-out set {metric}")
        label = "enRuler drift" if metric == "drift" else metric
        out.append(Sentence(f"worse everywhere {metric}",
                            f"{what} got worse in every configuration: {label} {listed} over seeds x lines vs step 0."))
    return out


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

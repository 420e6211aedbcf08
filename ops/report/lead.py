"""The report's first screen: one sentence per run (what was judged, the verdict, the number that
decided it with its CI, what that CI covers in the daemon's words) and the learning-vs-forgetting
picture. Every number in a sentence is read from the run's verdict and eval events, as the
tables below them are.

The seeds of one sweep configuration (ops/report/groups.py) get one sentence ("3 of 3 seeds
forget: ..."), with the crossed CI over seeds x lines at the last eval every seed reached, and
each seed's own sentence below it; what a seed's own CI covers, and where the env files are, is
said once for all of them, not once per seed. What the verdicts judge is said once when every
verdict on the page judges the same set (judged_once): each run's sentence then says only its
verdict and its numbers."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from tatu import formats
from tatu.daemon.ci_covers import ENV_FILE_PLACEHOLDER
from tatu.daemon.run.paths import SweepDir
from tatu.daemon.run.records import Verdict
from tatu.exitcodes import BAD_DATA, TatuExit
from tatu.ops.report.groups import RunGroup, crossed_band, group_runs
from tatu.ops.report.runs import RunRecord, fmt_pct
from tatu.pages.figures import PlotFile
from tatu.pages.markup import esc, figures
from tatu.records import RelativeChange
from tatu.sweep.judge.sweep_report import REPORT_FILE, read_report_json


def judged_set(verdict: Verdict) -> str | None:
    """The set whose change the verdict judged (sftHeld; ptVal for a trunk); None without numbers."""
    return verdict.numbers.set_name if verdict.numbers else None


def fmt_ci(change: RelativeChange | None) -> str:
    """A change with its CI, as the EVAL and VERDICT lines write it: +8.1% [+7.1%,+9.3%]."""
    return "n/a" if change is None else change.text()


def _drift_at(run: RunRecord, step) -> RelativeChange | None:
    return next((e.drift for e in run.evals if e.step == step), None)


def _limit(run: RunRecord) -> str:
    return f" against MIX_FORGET_LIMIT {fmt_pct(run.forget_limit)}" if run.forget_limit is not None else ""


def deciding_number(run: RunRecord, verdict: Verdict, terse: bool = False) -> str:
    """The number the verdict turned on, with its CI and step (the criteria: tatu/daemon/judge.py).
    terse: the numbers alone, without the criterion's words (said once for the page, judged_once)."""
    numbers, outcome = verdict.numbers, verdict.outcome
    if numbers is None:  # a run that never evaluated
        return str(verdict.reason or "no numbers")
    judged, step, change, drift, aborted = numbers.set_name, numbers.step, numbers.set_change, numbers.drift, numbers.aborted
    limit = "" if terse else _limit(run)
    if outcome == "forgets" and aborted and "MIX_FORGET_LIMIT" not in str(aborted):  # a non-finite loss, tensor or eval
        return f"{'' if terse else 'the run '}aborted at step {step}: {aborted}"
    if outcome == "forgets":
        worst_step = numbers.worst_drift_step
        worst = _drift_at(run, worst_step) or RelativeChange(numbers.worst_drift, None, None)
        return (f"{'worst drift' if terse else 'its worst drift,'} {fmt_ci(worst)} at step {worst_step}{limit}"
                + (" (aborted)" if aborted else ""))
    if terse:
        return f"{judged} {fmt_ci(change)} and drift {fmt_ci(drift)} at step {step}"
    if outcome == "holds":
        return f"{judged} {fmt_ci(change)} at step {step}, below 0 beyond its CI, with drift {fmt_ci(drift)}{limit}"
    if outcome == "flat":
        return f"{judged} {fmt_ci(change)} and drift {fmt_ci(drift)} at step {step}, both CIs across 0"
    return f"{judged} {fmt_ci(change)} at step {step}, not beyond its CI, with drift {fmt_ci(drift)}"


def judged_once(runs: list[RunRecord]) -> str | None:
    """The set most verdicts of these runs judged, when two or more did (said once, above the
    sentences; a run that judged another set, a trunk's ptVal, says its own); None otherwise (each
    sentence says it)."""
    judged = Counter(judged_set(run.verdict) for run in runs if run.verdict and judged_set(run.verdict))
    common = judged.most_common(1)
    return common[0][0] if common and common[0][1] >= 2 else None


def judged_once_html(judged: str, runs: list[RunRecord]) -> str:
    other = [run.name for run in runs if run.verdict and judged_set(run.verdict) not in (judged, None)]
    return (f'<p id="judged-on">Every verdict below is judged on the {esc(judged)} change vs step 0 and the English '
            "ruler's drift, by the criteria its run's config fixed before it ran (under Verdicts)"
            + (f"; {esc(', '.join(other))}: as {'its' if len(other) == 1 else 'their'} sentence says" if other else "")
            + ".</p>")


def sentence_html(run: RunRecord, covers_said: bool = True, tag: str = "p", css: str = "verdict-sentence",
                  judged_said: bool = False) -> str:
    """One run's sentence as a paragraph (class verdict-sentence, data-run its run); covers_said
    False leaves out what its CI covers (said once for a configuration's seeds); judged_said: what
    the verdict judged and by which criterion is said once above (judged_once), the verdict and its
    numbers here."""
    verdict = run.verdict
    if verdict is None:
        last = run.final_eval
        at = ("no eval yet" if last is None else
              f"at its last eval, step {last.step}: sftHeld {fmt_ci(last.changes.get('sftHeld'))}, "
              f"drift {fmt_ci(last.drift)}")
        status = run.status if run.abort else "still running, or stopped before its end"
        body = f"{esc(run.name)}: <b>no verdict yet</b> ({esc(status)}); {esc(at)}."
    else:
        judged = judged_set(verdict) or "?"
        covers = (verdict.ci_covers or {}).get("text")
        said = (f"<b>{esc(verdict.outcome)}</b>; {esc(deciding_number(run, verdict, terse=True))}" if judged_said else
                f"judged on the {esc(judged)} change vs step 0 and the English ruler's drift, it "
                f"<b>{esc(verdict.outcome)}</b>; decided by {esc(deciding_number(run, verdict))}")
        body = (f"{esc(run.name)}: {said}."
                + (f' <span class="ci-covers">{esc(covers)}.</span>' if covers and covers_said else ""))
    return f'<{tag} class="{css}" data-run="{esc(run.name)}">{body}</{tag}>'


def _outcomes(group: RunGroup) -> str:
    """"3 of 3 seeds forget", "2 of 3 seeds hold, 1 forgets", "... 1 has no verdict yet"."""
    counts = Counter(run.verdict.outcome if run.verdict else "no verdict yet" for run in group.runs)
    total, parts = len(group.runs), []
    for index, (outcome, n) in enumerate(counts.most_common()):
        verb = outcome
        if outcome == "no verdict yet":
            parts.append(f"{n} {'have' if n > 1 else 'has'} no verdict yet")
        else:
            parts.append(f"{n} of {total} seeds {_plural(verb, n)}" if index == 0 else f"{n} {_plural(verb, n)}")
    return ", ".join(parts)


def _plural(verb: str, n: int) -> str:
    """The verdict as a verb for n seeds: "forget" (3 seeds), "forgets" (1 seed)."""
    if n == 1:
        return verb
    return {"forgets": "forget", "holds": "hold", "flat": "are flat"}.get(verb, verb)


def sweep_stats(group: RunGroup, step: int) -> dict | None:
    """The configuration's changes over seeds at `step` as its sweep's report.json holds them
    (SweepDir.report, written by `tatu sweep report` before the run report in the demo): at the
    members' ends where every member ended at `step`, else at the common step where that is `step`,
    on the same seeds; None where report.json holds no such number: a run that is no sweep's member,
    a sweep not reported yet, a report of other seeds or of other steps (the run report computes its
    own then). One computation per number: the sentence shows the CI the sweep page and report.json
    show, and a report.json the run report cannot read is refused (65), never replaced by a second CI."""
    sweep = SweepDir.of_member(group.runs[0].run_dir) if group.is_configuration else None
    path = sweep.report / REPORT_FILE if sweep else None
    if path is None or not path.is_file():
        return None
    try:
        report = read_report_json(path)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise TatuExit(BAD_DATA, f"{path}: unreadable sweep report ({type(exc).__name__}: {exc}); "
                                 f"`tatu sweep report` writes it again") from None
    config = next((c for c in (report.compare.configs if report.compare else ()) if c.key == group.name), None)
    if config is None or len(config.results) != len(group.runs):
        return None
    if config.end_steps == (step,) and config.stats:
        return config.stats
    return config.stats_common if config.common_step == step and config.common_tokens is None else None


def _group_numbers(group: RunGroup) -> str:
    """Drift and the sftHeld change over seeds x lines at the last eval every seed reached, when
    the seeds kept their per-line scores (TATU_EVAL_LINES), as the sweep's report.json has them
    where it has (sweep_stats); "" otherwise."""
    ends = [run.final_eval.step for run in group.runs if run.final_eval]
    if len(ends) != len(group.runs):
        return ""
    common, said = min(ends), []
    swept = sweep_stats(group, common)
    for label, set_name in (("drift", "enRuler"), ("sftHeld", "sftHeld")):
        if swept is not None:  # the sweep's numbers, or none for a label it has none of: never a second CI
            if swept.get(label):
                said.append(f"{label} {swept[label].change.text()}")
            continue
        band = crossed_band(group, set_name, "change")
        if band is None or common not in band.steps:
            continue
        at = band.steps.index(common)
        if band.n_seeds[at] != len(group.runs):
            continue
        said.append(f"{label} {formats.fmt_ci(band.mean[at] / 100, band.lo[at] / 100, band.hi[at] / 100)}")
    if not said:
        return ""
    limit = next((r for r in group.runs if r.forget_limit is not None), None)
    return (f"{' and '.join(said)} over seeds x lines at step {common}, the last eval every seed reached,"
            + (_limit(limit) if limit else ""))


def group_sentence_html(group: RunGroup, judged: str | None = None) -> str:
    """One configuration's sentence (class verdict-sentence, data-config), its seeds' own sentences below."""
    numbers = _group_numbers(group)
    seeds = ", ".join(map(str, group.seeds))
    body = (f"{esc(group.name)} (seeds {esc(seeds)}): <b>{esc(_outcomes(group))}</b>"
            + (f"; {esc(numbers)}" if numbers else "") + ".")
    details = "".join(sentence_html(run, covers_said=False, tag="li", css="seed-sentence",
                                    judged_said=_said(run, judged)) for run in group.runs)
    return (f'<p class="verdict-sentence" data-config="{esc(group.name)}">{body}</p>\n'
            f'<ul class="seed-sentences" data-config="{esc(group.name)}">{details}</ul>')


def _said(run: RunRecord, judged: str | None) -> bool:
    """Whether what the run's verdict judged is the set said once above (judged_once)."""
    return judged is not None and run.verdict is not None and judged_set(run.verdict) == judged


def covers_once(groups: list[RunGroup]) -> str:
    """What each seed's own CI covers, once: the daemon's words with every seed's env file written
    <run>.env, and the directory those files are in (one path, not one per seed)."""
    runs = [run for g in groups if g.is_configuration for run in g.runs if run.verdict]
    texts, dirs = {}, {}
    for run in runs:
        covers = run.verdict.ci_covers or {}
        text, env_file = covers.get("text"), covers.get("env_file")
        if not text:
            continue
        if env_file:
            text = text.replace(env_file, ENV_FILE_PLACEHOLDER)
            dirs[str(Path(env_file).parent)] = True
        texts[text] = True
    if not texts:
        return ""
    where = (f" The seeds' env files, {ENV_FILE_PLACEHOLDER} for each run above, are in {', '.join(dirs)}." if dirs else "")
    return (f'<p class="ci-covers" id="seed-ci-covers">Each seed\'s own CIs (its sentence above): '
            f"{esc('; '.join(texts))}. The configuration's sentence is over its seeds: it includes what the "
            f"seeds vary.{esc(where)}</p>")


def lead_section(runs: list[RunRecord], picture: PlotFile | None, out_dir: Path,
                 groups: list[RunGroup] | None = None) -> str:
    """The first screen: the sentences (one per configuration of seeds, one per other run), then the
    picture (or why there is none)."""
    groups = group_runs(runs) if groups is None else groups
    judged = judged_once(runs)
    sentences = "\n".join(([judged_once_html(judged, runs)] if judged else [])
                          + [group_sentence_html(g, judged) if g.is_configuration
                             else sentence_html(g.runs[0], judged_said=_said(g.runs[0], judged)) for g in groups])
    sentences += covers_once(groups)
    drawn = figures([picture], out_dir) if picture else "<p>No eval with both drift and an sftHeld change yet: no picture.</p>"
    return f'<section id="lead">\n{sentences}\n{drawn}\n</section>'

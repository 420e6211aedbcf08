"""The report's first screen: one sentence per run (what was judged, the verdict, the number that
decided it with its CI, what that CI covers in the daemon's words) and the learning-vs-forgetting
picture. Every number in a sentence is read from the run's verdict and eval events, as the
tables below them are."""
from __future__ import annotations

from pathlib import Path

from tatu import formats
from tatu.ops.report.runs import RunRecord, fmt_pct
from tatu.pages.figures import PlotFile
from tatu.pages.markup import esc, figures


def judged_set(verdict: dict) -> str | None:
    """The set whose change the verdict judged: the `<set>_change` key of its numbers (sftHeld; ptVal for a trunk)."""
    key = next((k for k in (verdict.get("numbers") or {}) if k.endswith("_change")), None)
    return key[: -len("_change")] if key else None


def fmt_ci(point: dict | None) -> str:
    """A change with its CI, as the EVAL and VERDICT lines write it: +8.1% [+7.1%,+9.3%]."""
    if not point:
        return "n/a"
    return formats.fmt_ci(point.get("value"), point.get("lo"), point.get("hi"))


def _drift_at(run: RunRecord, step) -> dict | None:
    return next((e.get("drift") for e in run.evals if e["step"] == step), None)


def _limit(run: RunRecord) -> str:
    return f" against MIX_FORGET_LIMIT {fmt_pct(run.forget_limit)}" if run.forget_limit is not None else ""


def deciding_number(run: RunRecord, verdict: dict) -> str:
    """The number the verdict turned on, with its CI and step (the criteria: tatu/daemon/judge.py)."""
    numbers = verdict.get("numbers") or {}
    outcome, judged, step = verdict.get("verdict"), judged_set(verdict), numbers.get("step", verdict.get("step"))
    change, drift = numbers.get(f"{judged}_change"), numbers.get("drift")
    aborted = numbers.get("aborted")
    if outcome == "forgets" and aborted and "MIX_FORGET_LIMIT" not in str(aborted):  # a non-finite loss, tensor or eval
        return f"the run aborted at step {step}: {aborted}"
    if outcome == "forgets":
        trained = [e for e in run.evals if e["step"] > 0] or run.evals
        worst_step = numbers.get("worst_drift_step")
        if worst_step is None and trained:  # verdicts written before the daemon named the step
            worst_step = max(trained, key=lambda e: e["drift"].get("value") or 0)["step"]
        worst = _drift_at(run, worst_step) or {"value": numbers.get("worst_drift")}
        return f"its worst drift, {fmt_ci(worst)} at step {worst_step}{_limit(run)}" + (" (aborted)" if aborted else "")
    if outcome == "holds":
        return f"{judged} {fmt_ci(change)} at step {step}, below 0 beyond its CI, with drift {fmt_ci(drift)}{_limit(run)}"
    if outcome == "flat":
        return f"{judged} {fmt_ci(change)} and drift {fmt_ci(drift)} at step {step}, both CIs across 0"
    if not numbers:
        return str(verdict.get("reason") or "no numbers")
    return f"{judged} {fmt_ci(change)} at step {step}, not beyond its CI, with drift {fmt_ci(drift)}"


def sentence_html(run: RunRecord) -> str:
    """One run's sentence as a paragraph (class verdict-sentence, data-run its run)."""
    verdict = run.verdict
    if verdict is None:
        last = run.final_eval
        at = ("no eval yet" if last is None else
              f"at its last eval, step {last['step']}: sftHeld {fmt_ci((last.get('changes') or {}).get('sftHeld'))}, "
              f"drift {fmt_ci(last.get('drift'))}")
        status = run.status if run.abort else "still running, or stopped before its end"
        body = f"{esc(run.name)}: <b>no verdict yet</b> ({esc(status)}); {esc(at)}."
    else:
        judged = judged_set(verdict) or "?"
        covers = (verdict.get("ci_covers") or {}).get("text")
        body = (f"{esc(run.name)}: judged on the {esc(judged)} change vs step 0 and the English ruler's drift, it "
                f"<b>{esc(verdict.get('verdict'))}</b>; decided by {esc(deciding_number(run, verdict))}."
                + (f' <span class="ci-covers">{esc(covers)}.</span>' if covers else ""))
    return f'<p class="verdict-sentence" data-run="{esc(run.name)}">{body}</p>'


def lead_section(runs: list[RunRecord], picture: PlotFile | None, out_dir: Path) -> str:
    """The first screen: the sentences, then the picture (or why there is none)."""
    sentences = "\n".join(sentence_html(run) for run in runs)
    drawn = figures([picture], out_dir) if picture else "<p>No eval with both drift and an sftHeld change yet: no picture.</p>"
    return f'<section id="lead">\n{sentences}\n{drawn}\n</section>'

"""`tatu report RUN_DIR [RUN_DIR...] [--out DIR]`: PNG plots and one HTML page per set of runs.

Three parts: runs.py reads the runs (events, stored config), plots.py draws
them, this module writes the page. Every number on the page is read from the runs' events files
(eval and verdict events) or their stored config (`state/meta.json`); nothing is recomputed, so
the page shows exactly what the daemon measured and decided. Each number cell carries
`data-path` (where in the events it comes from) and `data-value` (the JSON value itself), so a
test or a script can check the page against the events file cell by cell.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tatu.daemon.ci_covers import ENV_FILE_PLACEHOLDER
from tatu.daemon.run.paths import EVENTS, RunDir
from tatu.daemon.run.records import EvalRecord
from tatu.ops.report.cells import cell, row
from tatu.ops.report.groups import group_runs
from tatu.ops.report.lead import judged_set, lead_section
from tatu.ops.report.metric_sections import categories_section, tasks_section
from tatu.ops.report.picture import render_picture
from tatu.ops.report.plots import render_plots
from tatu.ops.report.runs import RunRecord, fmt_int, load_run, report_sets
from tatu.pages.figures import DPI, FIGSIZE, PlotFile
from tatu.pages.markup import esc, figures, page, table, text_cell

__all__ = ["build_report", "load_run", "render_plots", "RunRecord", "FIGSIZE", "DPI", "add_args", "main"]


# --- HTML sections -------------------------------------------------------------------------------

def _eval_at(run: RunRecord, step) -> EvalRecord | None:
    """The eval of that step, else the last eval before it (an abort on a non-finite loss falls between evals)."""
    before = [e for e in run.evals if not isinstance(step, int) or e.step <= step]
    return before[-1] if before else None


def _value(change) -> float | None:
    """A change's value; None where there is no change (a set not scored at step 0, no trunk reference)."""
    return None if change is None else change.value


def _covers(covers: dict | None, env_said_once: bool = False) -> str:
    """What an eval's or a verdict's CIs cover (its ci_covers), in the daemon's words
    (tatu.daemon.ci_covers); nothing for a run written before the daemon said it. env_said_once: a
    configuration's seed, whose env-file directory the lead says once, so its file is named
    <run>.env here, not by its path again."""
    covers = covers or {}
    text = covers.get("text")
    if text and env_said_once and covers.get("env_file"):
        text = text.replace(covers["env_file"], ENV_FILE_PLACEHOLDER)
    return f' <span class="ci-covers">{esc(text)}.</span>' if text else ""


def _verdict_section(runs: list[RunRecord], env_said_once: frozenset[str] = frozenset()) -> str:
    rows, scope, sets = [], [], report_sets(runs)
    for run in runs:
        v = run.verdict
        if v is None:
            rows.append(row(f'{text_cell(run.name)}{text_cell(run.status)}<td class="verdict">no verdict '
                             f'(still running?)</td>{text_cell("")}<td colspan="7"></td>', run.name))
            continue
        numbers = v.numbers  # None: the run never evaluated (its verdict has a reason instead)
        change, drift, tronco = (numbers.set_change, numbers.drift, numbers.drift_tronco) if numbers else (None,) * 3
        judged = judged_set(v)
        key = f"{judged}_change" if judged else None
        # the set the verdict did not judge, shown beside it so a collapse there is not hidden by "holds"
        other = "sftHeld" if judged == "ptVal" else "ptVal"
        at = _eval_at(run, run.verdict_step)
        other_change = at.changes.get(other) if at else None
        other_cell = (cell(_value(other_change), "pct", f"eval/{at.step}/changes/{other}/value") if at
                      else "<td>n/a</td>")
        cells = (
            cell(run.verdict_step, "int", "verdict/step")
            + cell(_value(change), "pct", f"verdict/numbers/{key}/value")
            + cell(_value(drift), "pct", "verdict/numbers/drift/value")
            + text_cell(f"{other} (step {at.step})" if at else other) + other_cell
            + cell(_value(tronco), "pct", "verdict/numbers/drift_tronco/value")
            + cell(numbers.worst_drift if numbers else None, "pct", "verdict/numbers/worst_drift")
        )
        rows.append(row(f'{text_cell(run.name)}{text_cell(run.status)}<td class="verdict">{esc(v.outcome)}</td>'
                         f'{text_cell(v.line or v.reason or "")}{cells}', run.name))
        unjudged = [s for s in sets if s not in (judged, "enRuler")]
        scope.append(f'<li data-run="{esc(run.name)}">{esc(run.name)}: the verdict covers the {esc(judged or "?")} '
                     f"change vs step 0 and the English ruler (enRuler drift) only; {esc(', '.join(unjudged))} "
                     f"{'is' if len(unjudged) == 1 else 'are'} shown but not judged."
                     f"{_covers(v.ci_covers, run.name in env_said_once)}</li>")
    header = ["run", "status", "verdict", "verdict line", "step", "judged change vs step 0 (sftHeld; ptVal for a trunk)",
              "final drift (judged)", "not judged: set", "its change vs step 0", "final drift_tronco", "worst drift"]
    crit = "".join(
        f"<p>Criteria of {esc(r.name)} (fixed in its config before the run): "
        + "; ".join(f"<b>{esc(k)}</b>: {esc(c)}" for k, c in r.verdict.criteria.to_json().items()) + "</p>"
        for r in runs if r.verdict)
    scope_text = f'<p>What a verdict covers:</p><ul id="verdict-scope">{"".join(scope)}</ul>' if scope else ""
    return "<h2>Verdicts</h2>\n" + table(header, rows, "verdicts") + scope_text + crit


def _comparison_section(runs: list[RunRecord], env_said_once: frozenset[str] = frozenset()) -> str:
    rows, sets = [], report_sets(runs)
    for run in runs:
        final = run.final_eval
        if final is None:
            rows.append(row(f'{text_cell(run.name)}<td colspan="7">no eval yet</td>', run.name))
            continue
        step = final.step
        comparisons = [("drift (enRuler vs this run's step 0)", "drift", final.drift),
                       ("drift_tronco (enRuler vs the trunk)", "drift_tronco", final.drift_tronco)]
        comparisons += [(f"{s} change vs step 0", f"changes/{s}", final.changes[s]) for s in sets if s in final.changes]
        for label, where, point in comparisons:
            prefix = f"eval/{step}/{where}"
            if point is None:
                cells = f'{cell(step, "int", f"eval/{step}/step")}<td colspan="5">n/a</td>'
            else:
                cells = (cell(step, "int", f"eval/{step}/step") + cell(point.value, "pct", f"{prefix}/value")
                         + cell(point.lo, "pct", f"{prefix}/lo") + cell(point.hi, "pct", f"{prefix}/hi")
                         + cell(point.p_value, "p", f"{prefix}/p_value")
                         + cell(point.mde, "rate", f"{prefix}/mde"))
            rows.append(row(f"{text_cell(run.name)}{text_cell(label)}{cells}", run.name))
    header = ["run", "paired comparison (same lines)", "step", "change", "CI lo", "CI hi", "p-value", "MDE"]
    said = [r for r in runs if r.final_eval and _covers(r.final_eval.ci_covers)]
    covers = "".join(f'<li data-run="{esc(r.name)}">{esc(r.name)}:'
                     f'{_covers(r.final_eval.ci_covers, r.name in env_said_once)}</li>' for r in said)
    return ("<h2>Paired comparisons at the last eval</h2>\n<p>Each run against its own step-0 baseline "
            "(and the trunk), over the same lines: 95% CIs, p-values and the minimum detectable effect.</p>\n"
            + table(header, rows, "comparisons") + (f'<ul id="comparisons-covers">{covers}</ul>' if covers else ""))


def _history_section(runs: list[RunRecord]) -> str:
    parts, sets = ["<h2>Evals</h2>"], report_sets(runs)
    for run in runs:
        rows = []
        for record in run.evals:
            step = record.step
            cells = cell(step, "int", f"eval/{step}/step")
            for s in sets:
                summary = record.sets.get(s)
                shown = (summary.ppl, summary.lo, summary.hi) if summary else (None,) * 3
                for field_name, value in zip(("ppl", "lo", "hi"), shown):
                    cells += cell(value, "ppl", f"eval/{step}/sets/{s}/{field_name}", s)
            for field_name, value in zip(("value", "lo", "hi"), (record.drift.value, record.drift.lo, record.drift.hi)):
                cells += cell(value, "pct", f"eval/{step}/drift/{field_name}")
            flags = ("best" if record.best else "") + (f" ABORT: {record.abort}" if record.abort else "")
            rows.append(row(cells + text_cell(flags.strip()), run.name, title=record.line))
        header = ["step"] + [f"{s} {f}" for s in sets for f in ("ppl", "lo", "hi")] + ["drift", "drift lo", "drift hi", ""]
        extra = f" ({run.resumes} restart{'s' if run.resumes != 1 else ''})" if run.resumes else ""
        parts.append(f"<h3>{esc(run.name)}{esc(extra)}</h3>")
        parts.append(table(header, rows, f"evals-{esc(run.name)}") if rows else "<p>no eval yet</p>")
    return "\n".join(parts)


def _config_section(runs: list[RunRecord]) -> str:
    known = [r for r in runs if r.config is not None]
    notes = "".join(f"<p>{esc(r.name)}: config unknown ({esc(r.config_note)})</p>" for r in runs if r.config is None)
    keys = sorted({k for r in known for k in r.config})
    differing = [k for k in keys if len({json.dumps(r.config.get(k), sort_keys=True) for r in known}) > 1]
    rows = [row("".join([text_cell(k)] + [text_cell(json.dumps(r.config[k]) if r.config and k in r.config else
                                                    ("unknown" if r.config is None else "(unset)")) for r in runs]))
            for k in differing]
    if len(known) < 2:
        body = "<p>Fewer than two runs with a known config: nothing to compare.</p>"
    elif not differing:
        body = "<p>The configs are identical.</p>"
    else:
        body = table(["variable"] + [r.name for r in runs], rows, "config-diff")
    full = "".join(
        f"<details><summary>{esc(r.name)}: full config ({esc(r.config_note)})</summary><pre>"
        f"{esc(json.dumps(r.config, indent=1, sort_keys=True))}</pre></details>" for r in known)
    trains = "".join(f"<p>{esc(r.name)} trains: {esc(r.trainable)}</p>" for r in runs if r.trainable)
    return "<h2>Config differences</h2>\n" + notes + trains + body + full


def _generations_section(runs: list[RunRecord]) -> str:
    parts = ["<h2>Generations at the last eval that produced them</h2>"]
    for run in runs:
        record = run.last_generations
        parts.append(f"<h3>{esc(run.name)}</h3>")
        if record is None:
            parts.append("<p>no generations in the events (TATU_GEN_PROMPTS=0, or no eval yet)</p>")
            continue
        step, gen = record.step, record.generations
        accuracy = gen.get("accuracy") or {}
        prefix = f"eval/{step}/generations"
        cells = (cell(step, "int", f"eval/{step}/step")
                 + cell(accuracy.get("value"), "rate", f"{prefix}/accuracy/value")
                 + cell(accuracy.get("lo"), "rate", f"{prefix}/accuracy/lo")
                 + cell(accuracy.get("hi"), "rate", f"{prefix}/accuracy/hi")
                 + cell(accuracy.get("n"), "int", f"{prefix}/accuracy/n"))
        invented = gen.get("invented")
        if invented:
            cells += (cell(invented.get("rate"), "rate", f"{prefix}/invented/rate")
                      + "".join(cell(invented[k], "rate", f"{prefix}/invented/{k}") for k in ("lo", "hi") if k in invented)
                      + cell(invented.get("n_invented"), "int", f"{prefix}/invented/n_invented")
                      + cell(invented.get("n_words"), "int", f"{prefix}/invented/n_words")
                      + text_cell(", ".join(map(str, invented.get("examples") or []))))
        else:
            cells += '<td colspan="4">n/a (no dictionary)</td>'
        header = ["step", "accuracy", "CI lo", "CI hi", "n", "invented-word rate", "invented", "words", "examples"]
        parts.append(table(header, [row(cells, run.name)], f"gen-summary-{esc(run.name)}"))
        samples = [row(f"{text_cell(s.get('prompt', ''))}{text_cell(s.get('reference', ''))}{text_cell(s.get('output', ''))}")
                   for s in gen.get("samples") or []]
        parts.append(table(["prompt", "reference", "output (greedy)"], samples, f"gen-samples-{esc(run.name)}"))
    return "\n".join(parts)


def _plots_section(plots: list[PlotFile], out_dir: Path) -> str:
    if not plots:
        return "<h2>Plots</h2><p>no eval events yet: nothing to plot</p>"
    return "<h2>Plots</h2>\n" + figures(plots, out_dir)


def _unique_names(runs: list[RunRecord]) -> None:
    """Two run dirs with the same basename get their parent's name in front, so the legend can tell them apart."""
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.name] = seen.get(run.name, 0) + 1
    for run in runs:
        if seen[run.name] > 1:
            run.name = f"{run.run_dir.resolve().parent.name}/{run.name}"


def build_report(run_dirs: list[Path | str], out_dir: Path | str) -> Path:
    """Write the PNGs and index.html into out_dir; returns the path of index.html."""
    runs = [load_run(d) for d in run_dirs]
    _unique_names(runs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = group_runs(runs)  # the seeds of a sweep configuration together (one colour, band, sentence)
    env_said_once = frozenset(r.name for g in groups if g.is_configuration for r in g.runs)
    plots = render_plots(runs, out_dir, groups)
    sources = "".join(f"<li>{esc(r.name)}: {esc(RunDir(r.run_dir).events_file)} ({len(r.evals)} evals, "
                      f"last step {fmt_int(r.last_step)}; {esc(r.status)})</li>" for r in runs)
    # the answer first (docs/operations.md#the-run-report): the sentences and the picture, the other plots, then the tables
    named = [f"{g.name} (seeds {', '.join(map(str, g.seeds))})" if g.is_configuration else g.name for g in groups]
    html_text = page(f"tatu report: {', '.join(named)}", [
        lead_section(runs, render_picture(runs, out_dir, groups), out_dir, groups), _plots_section(plots, out_dir),
        f"<p>Every number on this page is read from these {EVENTS} files:</p><ul>{sources}</ul>",
        _verdict_section(runs, env_said_once), _comparison_section(runs, env_said_once), categories_section(runs), tasks_section(runs),
        _config_section(runs),
        _generations_section(runs), _history_section(runs),
    ])
    index = out_dir / "index.html"
    index.write_text(html_text, encoding="utf-8")
    return index


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help=f"run directories (with {EVENTS})")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: RUN_DIR/report for one run, ./report for several)")


def main(args: argparse.Namespace) -> int:
    out = args.out or (RunDir(args.run_dirs[0]).report if len(args.run_dirs) == 1 else Path("report"))
    index = build_report(args.run_dirs, out)
    print(f"report: {index}")
    return 0

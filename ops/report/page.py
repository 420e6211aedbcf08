"""`tatu report RUN_DIR [RUN_DIR...] [--out DIR]`: PNG plots and one HTML page per set of runs.

Three parts: runs.py reads the runs (events, stored config), plots.py draws
them, this module writes the page. Every number on the page is read from the runs' events files
(eval and verdict events) or their stored config (the resume state's metadata); nothing is recomputed, so
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
from tatu.ops.report.generations import generations_section
from tatu.ops.report.groups import group_runs
from tatu.ops.report.lead import judged_set, lead_section
from tatu.ops.report.metric_sections import categories_section, tasks_section
from tatu.ops.report.once import common_dir, opening, said_once, under
from tatu.ops.report.picture import render_picture
from tatu.ops.report.plots import key, render_plots
from tatu.ops.report.runs import RunRecord, fmt_int, load_run, report_sets
from tatu.pages.figures import DPI, FIGSIZE, PlotFile
from tatu.pages.markup import esc, figures, folded, page, table, text_cell

__all__ = ["build_report", "load_run", "render_plots", "RunRecord", "FIGSIZE", "DPI", "add_args", "main"]


# --- HTML sections -------------------------------------------------------------------------------

def _eval_at(run: RunRecord, step) -> EvalRecord | None:
    """The eval of that step, else the last eval before it (an abort on a non-finite loss falls between evals)."""
    before = [e for e in run.evals if not isinstance(step, int) or e.step <= step]
    return before[-1] if before else None


def _value(change) -> float | None:
    """A change's value; None where there is no change (a set not scored at step 0, no trunk reference)."""
    return None if change is None else change.value


def _covers_text(covers: dict | None, env_said_once: bool = False) -> str:
    """What an eval's or a verdict's CIs cover (its ci_covers), in the daemon's words
    (tatu.daemon.ci_covers); "" for a run written before the daemon said it. env_said_once: a
    configuration's seed, whose env-file directory the lead says once, so its file is named
    <run>.env here, not by its path again."""
    covers = covers or {}
    text = covers.get("text") or ""
    if text and env_said_once and covers.get("env_file"):
        text = text.replace(covers["env_file"], ENV_FILE_PLACEHOLDER)
    return text


def _line_without_covers(verdict) -> str:
    """The verdict line without what its CIs cover, which the daemon appends to it: the lead says
    that once (tatu.ops.report.lead), not once per run again in the table."""
    covers = (verdict.ci_covers or {}).get("text")
    line = verdict.line or verdict.reason or ""
    return line.removesuffix(f"; {covers}") if covers else line


def _verdict_section(runs: list[RunRecord]) -> str:
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
                         f'{text_cell(_line_without_covers(v))}{cells}', run.name))
        unjudged = [s for s in sets if s not in (judged, "enRuler")]
        scope.append((run.name, f"the verdict covers the {judged or '?'} change vs step 0 and the English ruler "
                                f"(enRuler drift) only; {', '.join(unjudged)} {'is' if len(unjudged) == 1 else 'are'} "
                                "shown but not judged."))
    header = ["run", "status", "verdict", "verdict line", "step", "judged change vs step 0 (sftHeld; ptVal for a trunk)",
              "final drift (judged)", "not judged: set", "its change vs step 0", "final drift_tronco", "worst drift"]
    criteria = said_once([(r.name, "; ".join(f"<b>{esc(k)}</b>: {esc(c)}" for k, c in r.verdict.criteria.to_json().items()))
                          for r in runs if r.verdict])
    crit = "".join(f"<p>Criteria of {esc(who)} (fixed in its config before the run): {text}</p>" for who, text in criteria)
    scope_text = ('<p>What a verdict covers (what its CIs cover: the sentences at the top):</p><ul id="verdict-scope">'
                  + "".join(f"<li>{esc(opening(who))}: {esc(text)}</li>" for who, text in said_once(scope)) + "</ul>"
                  if scope else "")
    return "<h2>Verdicts</h2>\n" + table(header, rows, "verdicts") + scope_text + crit


def _comparisons(final, sets: list[str]) -> list[tuple[str, str, object]]:
    """Each paired comparison at an eval: (its name, where in the eval, the change)."""
    return ([("drift (enRuler vs this run's step 0)", "drift", final.drift),
             ("drift_tronco (enRuler vs the trunk)", "drift_tronco", final.drift_tronco)]
            + [(f"{s} change vs step 0", f"changes/{s}", final.changes[s]) for s in sets if s in final.changes])


def _comparison_section(runs: list[RunRecord], env_said_once: frozenset[str] = frozenset()) -> str:
    """A block of rows per comparison (its name said once, each run's row below it), so the runs'
    numbers for one comparison stand together."""
    sets, blocks = report_sets(runs), {}
    for run in runs:
        final = run.final_eval
        if final is None:
            continue
        step = final.step
        for label, where, point in _comparisons(final, sets):
            prefix = f"eval/{step}/{where}"
            if point is None:
                cells = f'{cell(step, "int", f"eval/{step}/step")}<td colspan="5">n/a</td>'
            else:
                cells = (cell(step, "int", f"eval/{step}/step") + cell(point.value, "pct", f"{prefix}/value")
                         + cell(point.lo, "pct", f"{prefix}/lo") + cell(point.hi, "pct", f"{prefix}/hi")
                         + cell(point.p_value, "p", f"{prefix}/p_value")
                         + cell(point.mde, "rate", f"{prefix}/mde"))
            blocks.setdefault(label, []).append(row(f"{text_cell(run.name)}{cells}", run.name))
    header = ["run", "step", "change", "CI lo", "CI hi", "p-value", "MDE"]
    rows = [f'<tr><th colspan="{len(header)}" class="block">{esc(label)}</th></tr>\n' + "\n".join(block)
            for label, block in blocks.items()]
    waiting = [r.name for r in runs if r.final_eval is None]
    said = said_once([(r.name, text) for r in runs if r.final_eval
                      and (text := _covers_text(r.final_eval.ci_covers, r.name in env_said_once))])
    covers = "".join(f"<li>{esc(opening(who))}: {esc(text)}.</li>" for who, text in said)
    return ("<h2>Paired comparisons at the last eval</h2>\n<p>Each run against its own step-0 baseline "
            "(and the trunk), over the same lines: 95% CIs, p-values and the minimum detectable effect.</p>\n"
            + (table(header, rows, "comparisons") if rows else "")
            + (f"<p>No eval yet: {esc(', '.join(waiting))}.</p>" if waiting else "")
            + (f'<ul id="comparisons-covers" class="ci-covers">{covers}</ul>' if covers else ""))


def _history_section(runs: list[RunRecord]) -> str:
    """Every eval of every run, a table per run, folded (the plots above draw the same numbers)."""
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
        extra = f", {run.resumes} restart{'s' if run.resumes != 1 else ''}" if run.resumes else ""
        if rows:
            parts.append(folded(f"{run.name}: {len(rows)} evals, steps {run.evals[0].step} to {run.evals[-1].step}{extra}",
                                table(header, rows, f"evals-{esc(run.name)}")))
        else:
            parts.append(f"<p>{esc(run.name)}: no eval yet{esc(extra)}</p>")
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
    trains = "".join(f"<p>{esc(opening(who))} trains: {esc(line)}</p>"
                     for who, line in said_once([(r.name, r.trainable) for r in runs if r.trainable]))
    return "<h2>Config differences</h2>\n" + notes + trains + body + _full_configs(known, differing)


def _full_configs(known: list[RunRecord], differing: list[str]) -> str:
    """Every variable of every known config, folded: those the runs share once (those that differ
    are in the table above), and where each run's config was read from."""
    if not known:
        return ""
    shared = {k: v for k, v in known[0].config.items() if k not in differing}
    base = common_dir([Path(r.config_note) for r in known])
    sources = "; ".join(f"{r.name}: {under(Path(r.config_note), base)}" for r in known)
    what = "the full config" if len(known) == 1 else "the variables every config shares (those that differ are above)"
    return (f"<details><summary>{esc(what)}, read from {esc(base)}</summary>"
            f"<p>{esc(sources)}</p><pre>{esc(json.dumps(shared, indent=1, sort_keys=True))}</pre></details>")


def _sources(runs: list[RunRecord]) -> str:
    """Where every number comes from: each run's events file, the directory that holds them said once."""
    files = [RunDir(r.run_dir).events_file for r in runs]
    base = common_dir(files)
    listed = "".join(f"<li>{esc(under(f, base))} ({len(r.evals)} evals, last step {fmt_int(r.last_step)}; "
                     f"{esc(r.status)})</li>" for f, r in zip(files, runs))
    return f"<p>Every number on this page is read from these {EVENTS} files, in {esc(base)}:</p><ul>{listed}</ul>"


def _plots_section(plots: list[PlotFile], out_dir: Path, groups) -> str:
    if not plots:
        return "<h2>Plots</h2><p>no eval events yet: nothing to plot</p>"
    return f'<h2>Plots</h2>\n<p id="plots-key">{esc(key(groups))}</p>\n' + figures(plots, out_dir)


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
    # the answer first (docs/operations.md#the-run-report): the sentences and the picture, the other plots, then the tables
    named = [f"{g.name} (seeds {', '.join(map(str, g.seeds))})" if g.is_configuration else g.name for g in groups]
    html_text = page(f"tatu report: {', '.join(named)}", [
        lead_section(runs, render_picture(runs, out_dir, groups), out_dir, groups), _plots_section(plots, out_dir, groups),
        _sources(runs), _verdict_section(runs), _comparison_section(runs, env_said_once),
        categories_section(runs), tasks_section(runs), _config_section(runs), generations_section(runs),
        _history_section(runs),
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

"""`tatu report RUN_DIR [RUN_DIR...] [--out DIR]`: PNG plots and one HTML page per set of runs.

Every number on the page is read from the runs' events.jsonl (eval and verdict events) or their
stored config (`state/meta.json`); nothing is recomputed, so the page shows exactly what the
daemon measured and decided. Each number cell carries `data-path` (where in the events it comes
from) and `data-value` (the JSON value itself), so a test or a script can check the page against
events.jsonl cell by cell.
"""
from __future__ import annotations

import argparse
import base64
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from tatu.daemon.logs import read_events
from tatu.exitcodes import BAD_DATA, TatuExit
from tatu.formats import fmt_p as shared_fmt_p
from tatu.formats import fmt_pct as shared_fmt_pct

SETS = ("sftHeld", "ptVal", "enRuler")
PPL_DIGITS = {"sftHeld": 4, "ptVal": 2, "enRuler": 2}  # as in the EVAL contract line
FIGSIZE = (7.0, 4.0)
DPI = 100
PLOT_SIZE = (round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI))  # PNG width, height in pixels
# Where a run's config may be found: the resume state, or (a save died mid-swap, or the run
# finished and its state was not kept) the other checkpoints that carry the same meta.
CONFIG_SOURCES = ("state/meta.json", "state.old/meta.json", "final/meta.json", "best/meta.json")
# A forget limit this far above every plotted drift would flatten the curves into a line at 0:
# it is then written on the plot instead of drawn.
LIMIT_OFF_SCALE = 3.0


@dataclass
class RunRecord:
    """One run as its events.jsonl tells it."""

    name: str
    run_dir: Path
    evals: list[dict]  # one per step, ascending; a step evaluated twice (restart) keeps the later event
    verdict: dict | None  # the last verdict event; None while the run has not finished
    aborts: list[dict] = field(default_factory=list)
    config: dict | None = None  # None: no readable stored config (config_note says why)
    config_note: str = ""
    last_step: int | None = None  # the last optimizer step logged
    resumes: int = 0

    @property
    def abort(self) -> tuple[int | None, str] | None:
        """(step, reason) of the run's abort: the last abort event, else the verdict's numbers.aborted
        (at the verdict's step); None when the run did not abort."""
        if self.aborts:
            last = self.aborts[-1]
            step = last.get("step")
            return (step if isinstance(step, int) else None), str(last.get("reason") or "no reason logged")
        numbers = (self.verdict or {}).get("numbers") or {}
        if numbers.get("aborted"):
            step = numbers.get("step", self.verdict.get("step"))
            return (step if isinstance(step, int) else None), str(numbers["aborted"])
        return None

    @property
    def status(self) -> str:
        abort = self.abort
        if abort is not None:
            return f"aborted at step {fmt_int(abort[0])}: {abort[1]}" + ("" if self.verdict is not None else " (no verdict)")
        if self.verdict is not None:
            return "finished"
        return "running or stopped: no verdict yet"

    @property
    def final_eval(self) -> dict | None:
        return self.evals[-1] if self.evals else None

    @property
    def best_eval(self) -> dict | None:
        """The eval whose checkpoint is best/ (the last one flagged best)."""
        flagged = [e for e in self.evals if e.get("best")]
        return flagged[-1] if flagged else None

    @property
    def forget_limit(self) -> float | None:
        """MIX_FORGET_LIMIT of an SFT run (a trunk cannot forget); None when unknown."""
        if not self.config or self.config.get("TATU_MODE", "sft") != "sft":
            return None
        return _number(self.config.get("MIX_FORGET_LIMIT"))

    @property
    def last_generations(self) -> dict | None:
        with_generations = [e for e in self.evals if e.get("generations")]
        return with_generations[-1] if with_generations else None


def _number(value) -> float | None:
    """A JSON number as written by the run log (non-finite floats are stored as "inf"/"-inf"/null)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("inf", "-inf"):
        return float(value)
    return None


def _read_config(run_dir: Path) -> tuple[dict | None, str]:
    for relative in CONFIG_SOURCES:
        path = run_dir / relative
        if not path.is_file():
            continue
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return None, f"{path}: unreadable ({exc})"
        config = meta.get("config") if isinstance(meta, dict) else None
        if not isinstance(config, dict):
            return None, f"{path}: no 'config' object"
        return config, str(path)
    return None, f"no {CONFIG_SOURCES[0]} in {run_dir}"


def _check_eval(event: dict, path: Path, index: int) -> None:
    where = f"{path}: eval event #{index + 1}"
    if not isinstance(event.get("step"), int):
        raise TatuExit(BAD_DATA, f"{where}: 'step' is missing or not an integer")
    for key in ("sets", "drift"):
        if not isinstance(event.get(key), dict):
            raise TatuExit(BAD_DATA, f"{where} (step {event['step']}): '{key}' is missing or not an object")


def load_run(run_dir: Path | str) -> RunRecord:
    """Read `<run_dir>/events.jsonl` (a torn last line ignored) and the run's stored config."""
    run_dir = Path(run_dir)
    path = run_dir / "events.jsonl"
    if not path.is_file():
        raise TatuExit(BAD_DATA, f"{path}: not found (is {run_dir} a run directory? the run writes it at its first eval)")
    try:
        events = read_events(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise TatuExit(BAD_DATA, f"{path}: cannot read ({exc})")
    by_step: dict[int, dict] = {}
    verdict, aborts, last_step, resumes = None, [], None, 0
    for index, event in enumerate(events):
        kind = event.get("event") if isinstance(event, dict) else None
        if kind == "eval":
            _check_eval(event, path, index)
            by_step[event["step"]] = event  # after a restart the later eval of a step wins
        elif kind == "verdict":
            verdict = event
        elif kind == "abort":
            aborts.append(event)
        elif kind == "step" and isinstance(event.get("step"), int):
            last_step = event["step"]
        elif kind == "resumed":
            resumes += 1
    config, note = _read_config(run_dir)
    return RunRecord(
        name=run_dir.resolve().name, run_dir=run_dir, evals=[by_step[s] for s in sorted(by_step)], verdict=verdict,
        aborts=aborts, config=config, config_note=note, last_step=last_step, resumes=resumes,
    )


# --- formatting: one function per kind of number, used for every cell of that kind -----------

def fmt_ppl(value, set_name: str) -> str:
    number = _number(value)
    if number is None:
        return "n/a"
    return f"{number:.{PPL_DIGITS.get(set_name, 2)}f}" if math.isfinite(number) else str(number)


def fmt_pct(value) -> str:
    """A relative change (fraction): signed, one decimal, like the EVAL line's drift."""
    return shared_fmt_pct(_number(value))


def fmt_rate(value) -> str:
    """A proportion (accuracy, invented-word rate): one decimal, unsigned."""
    number = _number(value)
    return "n/a" if number is None else f"{number * 100:.1f}%"


def fmt_p(value) -> str:
    """A bootstrap p-value: "<0.001" at the floor of the default 2000 resamples."""
    return shared_fmt_p(_number(value))


def fmt_int(value) -> str:
    return "n/a" if value is None else str(value)


FORMATS = {"ppl": fmt_ppl, "pct": fmt_pct, "rate": fmt_rate, "p": fmt_p, "int": fmt_int}


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _cell(value, kind: str, path: str, set_name: str = "") -> str:
    """A number cell: its text, and where it came from with the raw value for checking."""
    text = fmt_ppl(value, set_name) if kind == "ppl" else FORMATS[kind](value)
    return (f'<td class="num" data-path="{_esc(path)}" data-kind="{kind}" '
            f'data-value="{_esc(json.dumps(value))}">{_esc(text)}</td>')


def _text_cell(text) -> str:
    return f"<td>{_esc(text)}</td>"


def _row(cells: str, run: str | None = None, title: str | None = None) -> str:
    """A table row; data-run names the run its numbers belong to."""
    attrs = (f' data-run="{_esc(run)}"' if run is not None else "") + (f' title="{_esc(title)}"' if title else "")
    return f"<tr{attrs}>{cells}</tr>"


def _table(header: list[str], rows: list[str], table_id: str) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "\n".join(rows)
    return f'<table id="{table_id}">\n<tr>{head}</tr>\n{body}\n</table>'


# --- plots -------------------------------------------------------------------------------------

def _colour(index: int) -> str:
    palette = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
    return palette[index % len(palette)]


def _series(run: RunRecord, getter) -> tuple[list[int], list[float], list[float], list[float]]:
    """(steps, values, lo, hi) of the evals where getter finds a dict with value/lo/hi."""
    steps, values, lows, highs = [], [], [], []
    for event in run.evals:
        point = getter(event)
        if not isinstance(point, dict):
            continue
        value = _number(point.get("ppl", point.get("value")))
        if value is None:
            continue
        lo, hi = _number(point.get("lo")), _number(point.get("hi"))
        steps.append(event["step"])
        values.append(value)
        lows.append(value if lo is None else lo)
        highs.append(value if hi is None else hi)
    return steps, values, lows, highs


@dataclass
class PlotFile:
    """One PNG written, with what its legend and axes say (so the page and tests can tell what was drawn)."""

    name: str
    caption: str
    legend: list[str]  # the legend's labels, in order
    notes: list[str]  # text written on the axes (limits too far above the curves to draw)
    yscale: str  # "log" or "linear", as the axes ended up


def _limit_groups(runs: list[RunRecord]) -> list[tuple[float, list[int]]]:
    """Distinct MIX_FORGET_LIMIT values with the indices of the runs that use each, in first-seen order."""
    groups: dict[float, list[int]] = {}
    for index, run in enumerate(runs):
        if run.forget_limit is not None:
            groups.setdefault(run.forget_limit, []).append(index)
    return list(groups.items())


def _plot(runs: list[RunRecord], getter, title: str, ylabel: str, path: Path, caption: str, scale: float = 1.0,
          draw_limits: bool = False, log_y: bool = False) -> PlotFile | None:
    """One PNG of a metric per eval step, every run overlaid; None when no run has the metric."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    plotted, top, notes = False, -math.inf, []
    for index, run in enumerate(runs):
        steps, values, lows, highs = _series(run, getter)
        if not steps:
            continue
        plotted = True
        colour = _colour(index)
        ax.fill_between(steps, [v * scale for v in lows], [v * scale for v in highs], color=colour, alpha=0.2, linewidth=0)
        ax.plot(steps, [v * scale for v in values], marker="o", markersize=3, color=colour, label=run.name)
        top = max([top, *(h * scale for h in highs if math.isfinite(h))])
        best = run.best_eval
        if best is not None and best["step"] in steps:
            at = steps.index(best["step"])
            # best/ is chosen on one set only (best_set); on any other plot the star is not that metric's best
            by = best.get("best_set") or "the run's best set"
            ax.plot([best["step"]], [values[at] * scale], marker="*", markersize=14, color=colour,
                    markeredgecolor="black", linestyle="none", zorder=4,
                    label=f"{run.name} best (by {by}, step {best['step']})")
        abort = run.abort
        if abort is not None:
            # a run that stopped early must not look like one that simply ended: mark where it stopped
            step, reason = abort
            before = [i for i, s in enumerate(steps) if step is None or s <= step]
            at = before[-1] if before else len(steps) - 1
            x = steps[at] if step is None else step
            ax.axvline(x, color="red", linestyle=":", linewidth=1.0)
            # drawn under the best star (an abort often happens at the best step) and larger, so both show
            ax.plot([x], [values[at] * scale], marker="X", markersize=18, color="red", markeredgecolor="black",
                    linestyle="none", zorder=3,
                    label=f"{run.name} aborted at step {fmt_int(step)}: {reason}")
    if not plotted:
        return None
    if draw_limits:
        # runs that share a limit share one line: one legend entry per distinct value
        groups = _limit_groups(runs)
        for order, (limit, members) in enumerate(groups):
            colour = _colour(members[0]) if len(members) == 1 else "black"
            label = f"MIX_FORGET_LIMIT {fmt_pct(limit)} ({', '.join(runs[i].name for i in members)})"
            if limit * scale <= max(top, 1.0) * LIMIT_OFF_SCALE:
                ax.axhline(limit * scale, color=colour, linestyle="--", linewidth=1.2, label=label)
            else:
                note = f"{label} (above the plot)"
                ax.text(0.01, 0.97 - 0.07 * order, note, transform=ax.transAxes, color=colour, fontsize=8, va="top")
                notes.append(note)
    if log_y:
        # ppl falls by orders of magnitude in SFT (thousands at step 0, single digits later)
        ax.set_yscale("log")
        low, high = ax.get_ylim()
        # within a decade 1-2-5 ticks leave one label or none: plain evenly spaced ticks then
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)) if high / low >= 10 else MaxNLocator(nbins=6))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel + (" (log scale)" if log_y else ""))
    ax.grid(True, which="both" if log_y else "major", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.savefig(path, format="png", dpi=DPI)
    return PlotFile(name=path.name, caption=caption, legend=ax.get_legend_handles_labels()[1], notes=notes,
                    yscale=ax.get_yscale())


def render_plots(runs: list[RunRecord], out_dir: Path) -> list[PlotFile]:
    """Write the PNGs into out_dir; returns each one written (runs without a metric give no plot of it)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for set_name in SETS:
        plot = _plot(runs, lambda e, s=set_name: e["sets"].get(s), f"{set_name} perplexity (95% CI band)", "ppl",
                     out_dir / f"{set_name}.png", log_y=True,
                     caption=f"{set_name} perplexity per eval step (log scale), 95% CI band, the step of best/ starred "
                             "(best is chosen by the run's best_set), aborts marked with a red X")
        if plot is not None:
            written.append(plot)
    plot = _plot(runs, lambda e: e.get("drift"), "enRuler drift vs the run's step 0 (95% paired CI band)", "drift (%)",
                 out_dir / "drift.png", scale=100.0, draw_limits=True,
                 caption="drift per eval step, paired 95% CI band, MIX_FORGET_LIMIT dashed (one line per distinct "
                         "value), the step of best/ starred, aborts marked with a red X")
    if plot is not None:
        written.append(plot)
    return written


# --- HTML sections -------------------------------------------------------------------------------

def _judged_set(verdict: dict) -> str | None:
    """The set whose change the verdict judged: the `<set>_change` key of its numbers (sftHeld; ptVal for a trunk)."""
    key = next((k for k in (verdict.get("numbers") or {}) if k.endswith("_change")), None)
    return key[: -len("_change")] if key else None


def _eval_at(run: RunRecord, step) -> dict | None:
    """The eval of that step, else the last eval before it (an abort on a non-finite loss falls between evals)."""
    before = [e for e in run.evals if not isinstance(step, int) or e["step"] <= step]
    return before[-1] if before else None


def _verdict_section(runs: list[RunRecord]) -> str:
    rows, scope = [], []
    for run in runs:
        v = run.verdict
        if v is None:
            rows.append(_row(f'{_text_cell(run.name)}{_text_cell(run.status)}<td class="verdict">no verdict '
                             f'(still running?)</td>{_text_cell("")}<td colspan="7"></td>', run.name))
            continue
        numbers = v.get("numbers") or {}
        judged = _judged_set(v)
        key = f"{judged}_change" if judged else None
        change = (numbers.get(key) or {}) if key else {}
        drift = numbers.get("drift") or {}
        # the set the verdict did not judge, shown beside it so a collapse there is not hidden by "holds"
        other = "sftHeld" if judged == "ptVal" else "ptVal"
        at = _eval_at(run, v.get("step"))
        other_change = ((at.get("changes") or {}).get(other) or {}) if at else {}
        other_cell = (_cell(other_change.get("value"), "pct", f"eval/{at['step']}/changes/{other}/value") if at
                      else "<td>n/a</td>")
        cells = (
            _cell(v.get("step"), "int", "verdict/step")
            + _cell(change.get("value"), "pct", f"verdict/numbers/{key}/value")
            + _cell(drift.get("value"), "pct", "verdict/numbers/drift/value")
            + _text_cell(f"{other} (step {at['step']})" if at else other) + other_cell
            + _cell(((numbers.get("drift_tronco") or {}).get("value")), "pct", "verdict/numbers/drift_tronco/value")
            + _cell(numbers.get("worst_drift"), "pct", "verdict/numbers/worst_drift")
        )
        rows.append(_row(f'{_text_cell(run.name)}{_text_cell(run.status)}<td class="verdict">{_esc(v.get("verdict"))}</td>'
                         f'{_text_cell(v.get("line") or v.get("reason", ""))}{cells}', run.name))
        unjudged = [s for s in SETS if s not in (judged, "enRuler")]
        scope.append(f'<li data-run="{_esc(run.name)}">{_esc(run.name)}: the verdict covers the {_esc(judged or "?")} '
                     f"change vs step 0 and the English ruler (enRuler drift) only; {_esc(', '.join(unjudged))} "
                     f"{'is' if len(unjudged) == 1 else 'are'} shown but not judged.</li>")
    header = ["run", "status", "verdict", "verdict line", "step", "judged change vs step 0 (sftHeld; ptVal for a trunk)",
              "final drift (judged)", "not judged: set", "its change vs step 0", "final drift_tronco", "worst drift"]
    crit = "".join(
        f"<p>Criteria of {_esc(r.name)} (fixed in its config before the run): "
        + "; ".join(f"<b>{_esc(k)}</b>: {_esc(c)}" for k, c in r.verdict["criteria"].items()) + "</p>"
        for r in runs if r.verdict and isinstance(r.verdict.get("criteria"), dict))
    scope_text = f'<p>What a verdict covers:</p><ul id="verdict-scope">{"".join(scope)}</ul>' if scope else ""
    return "<h2>Verdicts</h2>\n" + _table(header, rows, "verdicts") + scope_text + crit


def _comparison_section(runs: list[RunRecord]) -> str:
    rows = []
    for run in runs:
        final = run.final_eval
        if final is None:
            rows.append(_row(f'{_text_cell(run.name)}<td colspan="7">no eval yet</td>', run.name))
            continue
        step = final["step"]
        comparisons = [("drift (enRuler vs this run's step 0)", "drift", final.get("drift")),
                       ("drift_tronco (enRuler vs the trunk)", "drift_tronco", final.get("drift_tronco"))]
        comparisons += [(f"{s} change vs step 0", f"changes/{s}", (final.get("changes") or {}).get(s))
                        for s in SETS if s in (final.get("changes") or {})]
        for label, where, point in comparisons:
            prefix = f"eval/{step}/{where}"
            if point is None:
                cells = f'{_cell(step, "int", f"eval/{step}/step")}<td colspan="5">n/a</td>'
            else:
                cells = (_cell(step, "int", f"eval/{step}/step") + _cell(point.get("value"), "pct", f"{prefix}/value")
                         + _cell(point.get("lo"), "pct", f"{prefix}/lo") + _cell(point.get("hi"), "pct", f"{prefix}/hi")
                         + _cell(point.get("p_value"), "p", f"{prefix}/p_value")
                         + _cell(point.get("mde"), "rate", f"{prefix}/mde"))
            rows.append(_row(f"{_text_cell(run.name)}{_text_cell(label)}{cells}", run.name))
    header = ["run", "paired comparison (same lines)", "step", "change", "CI lo", "CI hi", "p-value", "MDE"]
    return ("<h2>Paired comparisons at the last eval</h2>\n<p>Each run against its own step-0 baseline "
            "(and the trunk), over the same lines: 95% CIs, p-values and the minimum detectable effect.</p>\n"
            + _table(header, rows, "comparisons"))


def _history_section(runs: list[RunRecord]) -> str:
    parts = ["<h2>Evals</h2>"]
    for run in runs:
        rows = []
        for event in run.evals:
            step = event["step"]
            cells = _cell(step, "int", f"eval/{step}/step")
            for s in SETS:
                point = event["sets"].get(s) or {}
                for field_name in ("ppl", "lo", "hi"):
                    cells += _cell(point.get(field_name), "ppl", f"eval/{step}/sets/{s}/{field_name}", s)
            for field_name in ("value", "lo", "hi"):
                cells += _cell(event["drift"].get(field_name), "pct", f"eval/{step}/drift/{field_name}")
            flags = ("best" if event.get("best") else "") + (f" ABORT: {event['abort']}" if event.get("abort") else "")
            rows.append(_row(cells + _text_cell(flags.strip()), run.name, title=event.get("line")))
        header = ["step"] + [f"{s} {f}" for s in SETS for f in ("ppl", "lo", "hi")] + ["drift", "drift lo", "drift hi", ""]
        extra = f" ({run.resumes} restart{'s' if run.resumes != 1 else ''})" if run.resumes else ""
        parts.append(f"<h3>{_esc(run.name)}{_esc(extra)}</h3>")
        parts.append(_table(header, rows, f"evals-{_esc(run.name)}") if rows else "<p>no eval yet</p>")
    return "\n".join(parts)


def _config_section(runs: list[RunRecord]) -> str:
    known = [r for r in runs if r.config is not None]
    notes = "".join(f"<p>{_esc(r.name)}: config unknown ({_esc(r.config_note)})</p>" for r in runs if r.config is None)
    keys = sorted({k for r in known for k in r.config})
    differing = [k for k in keys if len({json.dumps(r.config.get(k), sort_keys=True) for r in known}) > 1]
    rows = [_row("".join([_text_cell(k)] + [_text_cell(json.dumps(r.config[k]) if r.config and k in r.config else
                                                    ("unknown" if r.config is None else "(unset)")) for r in runs]))
            for k in differing]
    if len(known) < 2:
        body = "<p>Fewer than two runs with a known config: nothing to compare.</p>"
    elif not differing:
        body = "<p>The configs are identical.</p>"
    else:
        body = _table(["variable"] + [r.name for r in runs], rows, "config-diff")
    full = "".join(
        f"<details><summary>{_esc(r.name)}: full config ({_esc(r.config_note)})</summary><pre>"
        f"{_esc(json.dumps(r.config, indent=1, sort_keys=True))}</pre></details>" for r in known)
    return "<h2>Config differences</h2>\n" + notes + body + full


def _generations_section(runs: list[RunRecord]) -> str:
    parts = ["<h2>Generations at the last eval that produced them</h2>"]
    for run in runs:
        event = run.last_generations
        parts.append(f"<h3>{_esc(run.name)}</h3>")
        if event is None:
            parts.append("<p>no generations in the events (TATU_GEN_PROMPTS=0, or no eval yet)</p>")
            continue
        step, gen = event["step"], event["generations"]
        accuracy = gen.get("accuracy") or {}
        prefix = f"eval/{step}/generations"
        cells = (_cell(step, "int", f"eval/{step}/step")
                 + _cell(accuracy.get("value"), "rate", f"{prefix}/accuracy/value")
                 + _cell(accuracy.get("lo"), "rate", f"{prefix}/accuracy/lo")
                 + _cell(accuracy.get("hi"), "rate", f"{prefix}/accuracy/hi")
                 + _cell(accuracy.get("n"), "int", f"{prefix}/accuracy/n"))
        invented = gen.get("invented")
        if invented:
            cells += (_cell(invented.get("rate"), "rate", f"{prefix}/invented/rate")
                      + _cell(invented.get("n_invented"), "int", f"{prefix}/invented/n_invented")
                      + _cell(invented.get("n_words"), "int", f"{prefix}/invented/n_words")
                      + _text_cell(", ".join(map(str, invented.get("examples") or []))))
        else:
            cells += '<td colspan="4">n/a (no dictionary)</td>'
        header = ["step", "accuracy", "CI lo", "CI hi", "n", "invented-word rate", "invented", "words", "examples"]
        parts.append(_table(header, [_row(cells, run.name)], f"gen-summary-{_esc(run.name)}"))
        samples = [_row(f"{_text_cell(s.get('prompt', ''))}{_text_cell(s.get('reference', ''))}{_text_cell(s.get('output', ''))}")
                   for s in gen.get("samples") or []]
        parts.append(_table(["prompt", "reference", "output (greedy)"], samples, f"gen-samples-{_esc(run.name)}"))
    return "\n".join(parts)


def _plots_section(plots: list[PlotFile], out_dir: Path) -> str:
    if not plots:
        return "<h2>Plots</h2><p>no eval events yet: nothing to plot</p>"
    figures = []
    for plot in plots:
        name, caption = plot.name, plot.caption
        data = base64.b64encode((out_dir / name).read_bytes()).decode("ascii")
        figures.append(f'<figure><a href="{_esc(name)}"><img src="data:image/png;base64,{data}" '
                       f'width="{PLOT_SIZE[0]}" height="{PLOT_SIZE[1]}" alt="{_esc(caption)}"></a>'
                       f'<figcaption>{_esc(caption)} (<a href="{_esc(name)}">{_esc(name)}</a>)</figcaption></figure>')
    return "<h2>Plots</h2>\n" + "\n".join(figures)


STYLE = """body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}
td.num{text-align:right;font-family:monospace}th{background:#f3f3f3}figure{display:inline-block;margin:0 1em 1em 0}"""


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
    plots = render_plots(runs, out_dir)
    sources = "".join(f"<li>{_esc(r.name)}: {_esc(r.run_dir / 'events.jsonl')} ({len(r.evals)} evals, "
                      f"last step {fmt_int(r.last_step)}; {_esc(r.status)})</li>" for r in runs)
    page = "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>tatu report: {_esc(', '.join(r.name for r in runs))}</title><style>{STYLE}</style></head><body>",
        f"<h1>tatu report: {_esc(', '.join(r.name for r in runs))}</h1>",
        f"<p>Every number below is read from these events.jsonl files:</p><ul>{sources}</ul>",
        _verdict_section(runs), _comparison_section(runs), _plots_section(plots, out_dir), _config_section(runs),
        _generations_section(runs), _history_section(runs), "</body></html>", "",
    ])
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="run directories (with events.jsonl)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: RUN_DIR/report for one run, ./report for several)")


def main(args: argparse.Namespace) -> int:
    out = args.out or (args.run_dirs[0] / "report" if len(args.run_dirs) == 1 else Path("report"))
    index = build_report(args.run_dirs, out)
    print(f"report: {index}")
    return 0

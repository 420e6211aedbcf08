"""The report's plots: one PNG per metric, every run overlaid, written with matplotlib's Agg."""
from __future__ import annotations

import math
from pathlib import Path

from tatu.ops.report.runs import RunRecord, fmt_int, fmt_pct, number, report_sets
from tatu.pages.figures import ABORT_MARK, PlotFile, colour as _colour, new_axes, save

# A forget limit this far above every plotted drift would flatten the curves into a line at 0:
# it is then written on the plot instead of drawn.
LIMIT_OFF_SCALE = 3.0


def _series(run: RunRecord, getter) -> tuple[list[int], list[float], list[float], list[float]]:
    """(steps, values, lo, hi) of the evals where getter finds a dict with value/lo/hi."""
    steps, values, lows, highs = [], [], [], []
    for event in run.evals:
        point = getter(event)
        if not isinstance(point, dict):
            continue
        value = number(point.get("ppl", point.get("value")))
        if value is None:
            continue
        lo, hi = number(point.get("lo")), number(point.get("hi"))
        steps.append(event["step"])
        values.append(value)
        lows.append(value if lo is None else lo)
        highs.append(value if hi is None else hi)
    return steps, values, lows, highs


def limit_groups(runs: list[RunRecord]) -> list[tuple[float, list[int]]]:
    """Distinct MIX_FORGET_LIMIT values with the indices of the runs that use each, in first-seen order."""
    groups: dict[float, list[int]] = {}
    for index, run in enumerate(runs):
        if run.forget_limit is not None:
            groups.setdefault(run.forget_limit, []).append(index)
    return list(groups.items())


def _draw_run(ax, index: int, run: RunRecord, getter, scale: float) -> float | None:
    """One run's line, CI band, best star and abort mark; the top of its band (None: no data)."""
    steps, values, lows, highs = _series(run, getter)
    if not steps:
        return None
    colour = _colour(index)
    ax.fill_between(steps, [v * scale for v in lows], [v * scale for v in highs], color=colour, alpha=0.2, linewidth=0)
    ax.plot(steps, [v * scale for v in values], marker="o", markersize=3, color=colour, label=run.name)
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
        ax.plot([x], [values[at] * scale], markersize=18, zorder=3, **ABORT_MARK,
                label=f"{run.name} aborted at step {fmt_int(step)}: {reason}")
    return max([-math.inf, *(h * scale for h in highs if math.isfinite(h))])


def _draw_limits(ax, runs: list[RunRecord], top: float, scale: float) -> list[str]:
    """MIX_FORGET_LIMIT lines (runs that share a limit share one); notes for those above the plot,
    written in the legend (below the axes: text on the axes could cover a curve)."""
    notes = []
    for limit, members in limit_groups(runs):
        colour = _colour(members[0]) if len(members) == 1 else "black"
        label = f"MIX_FORGET_LIMIT {fmt_pct(limit)} ({', '.join(runs[i].name for i in members)})"
        if limit * scale <= max(top, 1.0) * LIMIT_OFF_SCALE:
            ax.axhline(limit * scale, color=colour, linestyle="--", linewidth=1.2, label=label)
        else:
            note = f"{label} (above the plot)"
            ax.plot([], [], linestyle="none", label=note)
            notes.append(note)
    return notes


def _log_axis(ax) -> None:
    """ppl falls by orders of magnitude in SFT (thousands at step 0, single digits later)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    ax.set_yscale("log")
    low, high = ax.get_ylim()
    # within a decade 1-2-5 ticks leave one label or none: plain evenly spaced ticks then
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)) if high / low >= 10 else MaxNLocator(nbins=6))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _plot(runs: list[RunRecord], getter, title: str, ylabel: str, path: Path, caption: str, scale: float = 1.0,
          draw_limits: bool = False, log_y: bool = False) -> PlotFile | None:
    """One PNG of a metric per eval step, every run overlaid; None when no run has the metric."""
    fig, ax = new_axes()
    tops = [t for index, run in enumerate(runs) if (t := _draw_run(ax, index, run, getter, scale)) is not None]
    if not tops:
        return None
    notes = _draw_limits(ax, runs, max(tops), scale) if draw_limits else []
    if log_y:
        _log_axis(ax)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel + (" (log scale)" if log_y else ""))
    ax.grid(True, which="both" if log_y else "major", alpha=0.3)
    return save(fig, ax, path, caption, notes)


def render_plots(runs: list[RunRecord], out_dir: Path) -> list[PlotFile]:
    """Write the PNGs into out_dir; returns each one written (runs without a metric give no plot of it)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for set_name in report_sets(runs):
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


"""The report's plots: one PNG per metric, every run overlaid, written with matplotlib's Agg.

Runs are drawn by group (ops/report/groups.py): a run alone keeps its own line and CI band; the
seeds of one sweep configuration share one colour, each seed a thin line, and the configuration
has one band, the crossed CI over its seeds x lines, around the mean over seeds. Everything drawn
for a group is in its colour (its aborts too, an X: tatu.pages.figures.abort_mark), and no two
groups share one while the palette lasts (eight groups). How to read the plots is said once, above
them (key); each plot's own caption says only what it plots. The plots are drawn two to a row."""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from tatu.daemon.run.records import EvalRecord
from tatu.ops.report.groups import Band, RunGroup, crossed_band, group_runs
from tatu.ops.report.runs import RunRecord, fmt_int, fmt_pct, number, report_sets
from tatu.pages.figures import PAIR_FIGSIZE, PlotFile, abort_mark, colour as _colour, new_axes, save

# A forget limit this far above every plotted drift would flatten the curves into a line at 0:
# it is then written on the plot instead of drawn.
LIMIT_OFF_SCALE = 3.0


# A metric of an eval: (value, CI lo, CI hi) as the record holds them, None where the eval lacks it.
Metric = Callable[[EvalRecord], tuple | None]


def set_ppl(set_name: str) -> Metric:
    """A set's perplexity with its CI (None at an eval that did not score the set)."""
    def metric(record: EvalRecord) -> tuple | None:
        summary = record.sets.get(set_name)
        return None if summary is None else (summary.ppl, summary.lo, summary.hi)
    return metric


def ruler_drift(record: EvalRecord) -> tuple:
    """The eval's drift (enRuler vs the run's step 0) with its paired CI."""
    return record.drift.value, record.drift.lo, record.drift.hi


def _series(run: RunRecord, metric: Metric) -> tuple[list[int], list[float], list[float], list[float]]:
    """(steps, values, lo, hi) of the evals that have the metric; an unknown end of a CI is the value."""
    steps, values, lows, highs = [], [], [], []
    for record in run.evals:
        point = metric(record)
        if point is None:
            continue
        value, lo, hi = (number(x) for x in point)
        if value is None:
            continue
        steps.append(record.step)
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


def group_limits(groups: list[RunGroup]) -> list[tuple[float, list[int]]]:
    """Distinct MIX_FORGET_LIMIT values with the indices of the groups whose runs use each."""
    found: dict[float, list[int]] = {}
    for index, group in enumerate(groups):
        for limit in dict.fromkeys(r.forget_limit for r in group.runs if r.forget_limit is not None):
            found.setdefault(limit, []).append(index)
    return list(found.items())


def last_forecast(run: RunRecord) -> EvalRecord | None:
    """The run's last eval that forecast its drift (from an SFT run's third eval on), None without one."""
    return next((record for record in reversed(run.evals) if record.forecast is not None), None)


def _draw_forecast(ax, colour, run: RunRecord, scale: float) -> float | None:
    """The last forecast's band from its eval to the run's last step, dashed, in the run's colour; its top."""
    record = last_forecast(run)
    if record is None:
        return None
    band, forecast = record.forecast.band, record.forecast
    steps = [p.step for p in band]
    label = (f"{run.name} forecast at step {record.step}: drift at step {forecast.end} "
             f"{fmt_pct(forecast.value)}, {forecast.level:.0%} interval (dashed)")
    ax.fill_between(steps, [p.lo * scale for p in band], [p.hi * scale for p in band], color=colour, alpha=0.08,
                    linewidth=0.8, linestyle="--", edgecolor=colour, label=label)
    ax.plot(steps, [p.value * scale for p in band], color=colour, linestyle="--", linewidth=1.0, label=label)
    return max([-math.inf, *(p.hi * scale for p in band if math.isfinite(p.hi))])


def _draw_run(ax, index: int, run: RunRecord, metric: Metric, scale: float, forecast: bool = False) -> float | None:
    """One run's line in its CI band (one legend entry), best star and abort mark, all in its
    colour, and (`forecast`: the drift plot) its last forecast's band to the last step; the top of
    what was drawn (None: no data)."""
    steps, values, lows, highs = _series(run, metric)
    if not steps:
        return None
    colour = _colour(index)
    forecast_top = _draw_forecast(ax, colour, run, scale) if forecast else None
    ax.fill_between(steps, [v * scale for v in lows], [v * scale for v in highs], color=colour, alpha=0.2, linewidth=0,
                    label=run.name)
    ax.plot(steps, [v * scale for v in values], marker="o", markersize=3, color=colour, label=run.name)
    best = run.best_eval
    if best is not None and best.step in steps:
        at = steps.index(best.step)
        # best/ is chosen on one set only (best_set); on any other plot the star is not that metric's best
        by = best.best_set or "the run's best set"
        ax.plot([best.step], [values[at] * scale], marker="*", markersize=14, color=colour,
                markeredgecolor="black", linestyle="none", zorder=4,
                label=f"{run.name} best (by {by}, step {best.step})")
    abort = run.abort
    if abort is not None:
        # a run that stopped early must not look like one that simply ended: mark where it stopped
        step, reason = abort
        before = [i for i, s in enumerate(steps) if step is None or s <= step]
        at = before[-1] if before else len(steps) - 1
        x = steps[at] if step is None else step
        label = f"{run.name} aborted at step {fmt_int(step)}: {reason}"
        ax.axvline(x, color=colour, linestyle=":", linewidth=1.0, label=label)
        # drawn under the best star (an abort often happens at the best step) and larger, so both show
        ax.plot([x], [values[at] * scale], markersize=18, zorder=3, **abort_mark(colour), label=label)
    top = max([-math.inf, *(h * scale for h in highs if math.isfinite(h))])
    return top if forecast_top is None else max(top, forecast_top)


def _draw_limits(ax, groups: list[RunGroup], top: float, scale: float) -> list[str]:
    """MIX_FORGET_LIMIT lines (groups that share a limit share one); notes for those above the plot,
    written in the legend (below the axes: text on the axes could cover a curve) with a dashed
    marker like the line's, so every legend entry has one."""
    notes = []
    for limit, members in group_limits(groups):
        colour = _colour(members[0]) if len(members) == 1 else "black"
        label = f"MIX_FORGET_LIMIT {fmt_pct(limit)} ({', '.join(groups[i].name for i in members)})"
        if limit * scale <= max(top, 1.0) * LIMIT_OFF_SCALE:
            ax.axhline(limit * scale, color=colour, linestyle="--", linewidth=1.2, label=label)
        else:
            note = f"{label} (above the plot)"
            ax.plot([], [], color=colour, linestyle="--", linewidth=1.2, label=note)
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


def _seeds_text(group: RunGroup) -> str:
    return ", ".join(str(seed) for seed in group.seeds)


def _draw_group(ax, index: int, group: RunGroup, metric: Metric, scale: float, band: Band | None) -> float | None:
    """A configuration's seeds as thin lines of its colour, its band (crossed, over seeds x lines)
    around the mean over seeds (one entry: the mean line on its band), each seed's best star and
    abort mark, one legend entry each, all in the configuration's colour; the top of what was drawn
    (None: no data)."""
    colour, tops, aborted = _colour(index), [], []
    for run in group.runs:
        steps, values, _, _ = _series(run, metric)
        if not steps:
            continue
        ax.plot(steps, [v * scale for v in values], color=colour, linewidth=0.8, alpha=0.75, marker="o", markersize=2,
                label=f"{group.name}: seeds {_seeds_text(group)} (thin lines)" if not tops else None)
        tops += [v * scale for v in values if math.isfinite(v)]
        best = run.best_eval
        if best is not None and best.step in steps:
            ax.plot([best.step], [values[steps.index(best.step)] * scale], marker="*", markersize=10,
                    color=colour, markeredgecolor="black", linestyle="none", zorder=4)
        if run.abort is not None:
            step, _ = run.abort
            before = [i for i, s in enumerate(steps) if step is None or s <= step]
            at = before[-1] if before else len(steps) - 1
            ax.plot([steps[at] if step is None else step], [values[at] * scale], markersize=12, zorder=3,
                    **abort_mark(colour))
            aborted.append(f"s{group.seeds[group.runs.index(run)]} at step {fmt_int(step)}")
    if not tops:
        return None
    if band is not None:
        label = f"{group.name}: mean (thick) and 95% CI of the mean over seeds x lines (max {max(band.n_seeds)} seeds)"
        ax.fill_between(band.steps, band.lo, band.hi, color=colour, alpha=0.2, linewidth=0, label=label)
        ax.plot(band.steps, band.mean, color=colour, linewidth=2.0, label=label)
        tops += [h for h in band.hi if math.isfinite(h)]
    ax.plot([], [], marker="*", markersize=10, color=colour, markeredgecolor="black", linestyle="none",
            label=f"{group.name}: each seed's best/ (by {_best_set(group)})")
    if aborted:
        ax.plot([], [], markersize=12, **abort_mark(colour),
                label=f"{group.name}: {len(aborted)} of {len(group.runs)} seeds aborted ({', '.join(aborted)})")
    return max(tops)


def _best_set(group: RunGroup) -> str:
    named = {r.best_eval.best_set for r in group.runs if r.best_eval} - {None}
    return ", ".join(sorted(named)) or "the run's best set"


def _plot(groups: list[RunGroup], metric: Metric, title: str, ylabel: str, path: Path, caption: str, scale: float = 1.0,
          draw_limits: bool = False, log_y: bool = False, bands=None, forecast: bool = False) -> PlotFile | None:
    """One PNG of a metric per eval step, every group overlaid; None when no run has the metric.
    bands(group): a configuration's crossed band (None: none drawn); forecast: a run alone's last
    drift forecast drawn to its last step."""
    fig, ax = new_axes(PAIR_FIGSIZE)
    tops = []
    for index, group in enumerate(groups):
        if group.is_configuration:
            top = _draw_group(ax, index, group, metric, scale, bands(group) if bands else None)
        else:
            top = _draw_run(ax, index, group.runs[0], metric, scale, forecast)
        if top is not None:
            tops.append(top)
    if not tops:
        return None
    notes = _draw_limits(ax, groups, max(tops), scale) if draw_limits else []
    if log_y:
        _log_axis(ax)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel + (" (log scale)" if log_y else ""))
    ax.grid(True, which="both" if log_y else "major", alpha=0.3)
    return save(fig, ax, path, caption, notes)


def key(groups: list[RunGroup]) -> str:
    """How to read the plots, said once above them: what every line, band and mark stands for."""
    said = ["Each plot: one point per eval step, one colour per run or configuration, every mark in its colour."]
    if any(g.is_configuration for g in groups):
        said.append("A configuration run at several seeds: its seeds thin lines, their mean a thick line in one band, "
                    "the 95% CI of the mean change vs step 0 over its seeds x the lines every seed scored (crossed, "
                    "evals/seeds/stats.py); on a perplexity plot the band is drawn around the mean perplexity, so it "
                    "is a point at step 0.")
    if not all(g.is_configuration for g in groups):
        said.append("A run alone: its line in its own 95% CI band.")
    said.append("A star marks the step of best/ (chosen by the run's best_set), an X where a run aborted; on the drift "
                "plot MIX_FORGET_LIMIT is dashed, one line per distinct value.")
    if any(last_forecast(run) is not None for group in groups if not group.is_configuration for run in group.runs):
        said.append("On the drift plot a run alone's last forecast (docs/forecast.md) runs dashed from the eval that "
                    "made it to the run's last step, in a light band: its 90% prediction interval.")
    return " ".join(said)


def render_plots(runs: list[RunRecord], out_dir: Path, groups: list[RunGroup] | None = None) -> list[PlotFile]:
    """Write the PNGs into out_dir; returns each one written (runs without a metric give no plot of it)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = group_runs(runs) if groups is None else groups
    written = []
    for set_name in report_sets(runs):
        plot = _plot(groups, set_ppl(set_name), f"{set_name} perplexity (95% CI band)", "ppl",
                     out_dir / f"{set_name}.png", log_y=True,
                     bands=lambda g, s=set_name: crossed_band(g, s, "ppl"),
                     caption=f"{set_name} perplexity per eval step (log scale)")
        if plot is not None:
            written.append(plot)
    plot = _plot(groups, ruler_drift, "enRuler drift vs the run's step 0 (95% paired CI band)", "drift (%)",
                 out_dir / "drift.png", scale=100.0, draw_limits=True, bands=lambda g: crossed_band(g, "enRuler", "change"),
                 forecast=True, caption="enRuler drift per eval step vs each run's step 0, paired CI")
    if plot is not None:
        written.append(plot)
    return written

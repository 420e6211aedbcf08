"""The sweep page's plots, drawn like the run report's (tatu.pages.figures): the drift of each
configuration against the axis, and the trade-off, one point per member. A member that aborted
is marked on both (the run report's red X): its numbers are from its abort's eval, not an end."""
from __future__ import annotations

from pathlib import Path

from tatu.pages.figures import ABORT_MARK, PlotFile, colour, new_axes, save
from tatu.sweep.judge.records import ConfigResult
from tatu.sweep.judge.sweep_report import SweepReport


def _states(config: ConfigResult) -> dict[str, str]:
    return {str(r.seed): r.state for r in config.results}


def _axis_positions(configs: list[ConfigResult], axis: str) -> list[float]:
    try:
        return [float(c.values[axis]) for c in configs]
    except ValueError:  # a categorical axis: evenly spaced, labelled by value
        return [float(i) for i in range(len(configs))]


def drift_axes(data: SweepReport):
    """(figure, axes) of the end drift per configuration against the rule's axis; None without one."""
    axis = data.verdict.axis
    # on an axis, an interpolated configuration would sit on its parent's value: it is in tradeoff.png
    configs = [c for c in data.compare.configs if c.stats["drift"]
               and (axis == "config" or not any(r.interpolated for r in c.results))]
    if not configs:
        return None
    fig, ax = new_axes()
    xs = _axis_positions(configs, axis)
    aborted_label = "aborted member (its abort's eval)"
    for x, c in zip(xs, configs):
        d, states = c.stats["drift"], _states(c)
        for seed, value in d.per_seed.items():
            if states.get(seed) == "aborted":
                ax.plot([x], [value * 100], markersize=9, zorder=2, label=aborted_label, **ABORT_MARK)
                aborted_label = None
            else:
                ax.plot([x], [value * 100], marker="o", color="0.6", markersize=4, linestyle="none", zorder=2)
        change = d.change
        ax.errorbar([x], [change.value * 100], yerr=[[(change.value - change.lo) * 100], [(change.hi - change.value) * 100]],
                    fmt="o", color=colour(0), capsize=4, zorder=3)
    limit = configs[0].effective.get("MIX_FORGET_LIMIT")
    if limit is not None:
        ax.axhline(limit * 100, color=colour(1), linestyle="--", label=f"MIX_FORGET_LIMIT {limit * 100:.0f}%")
    ax.set_xticks(xs, [c.values[axis] for c in configs])
    ax.set_xlabel(axis)
    ax.set_ylabel("enRuler drift at the end (%)")
    ax.set_title(f"{data.name}: drift vs {axis} (grey: seeds; blue: mean, 95% CI)")
    ax.grid(True, alpha=0.3)
    return fig, ax


def tradeoff_axes(data: SweepReport):
    """(figure, axes) of every member's drift against its sftHeld change; None without a member."""
    configs = [c for c in data.compare.configs if c.stats["drift"] and c.stats["sftHeld"]]
    if not configs:
        return None
    fig, ax = new_axes()
    aborted_label = "aborted member (its abort's eval)"
    for i, c in enumerate(configs):
        d, s, states = c.stats["drift"], c.stats["sftHeld"], _states(c)
        seeds = [k for k in d.per_seed if k in s.per_seed]
        ax.plot([d.per_seed[k] * 100 for k in seeds], [s.per_seed[k] * 100 for k in seeds], marker="o",
                markersize=5, color=colour(i), linestyle="none", label=c.key, zorder=3)
        stopped = [k for k in seeds if states.get(k) == "aborted"]
        if stopped:  # an outline around the configuration's dot, so both show
            ax.plot([d.per_seed[k] * 100 for k in stopped], [s.per_seed[k] * 100 for k in stopped],
                    markersize=15, zorder=2, label=aborted_label,
                    **{**ABORT_MARK, "markerfacecolor": "none", "markeredgecolor": "red", "markeredgewidth": 1.5})
            aborted_label = None
    ax.set_xlabel("enRuler drift (%)")
    ax.set_ylabel("sftHeld change (%)")
    ax.set_title("the trade-off: one point per member")
    ax.grid(True, alpha=0.3)
    return fig, ax


def render_plots(data: SweepReport, out_dir: Path) -> list[PlotFile]:
    """The PNGs of the comparison stage, written into out_dir (none before it has a result)."""
    if not data.compare:
        return []
    made = []
    drawn = drift_axes(data)
    if drawn:
        made.append(save(*drawn, Path(out_dir) / "drift_vs_axis.png",
                         "enRuler drift at each member's end per configuration: seeds grey, the mean with its 95% CI "
                         "(seeds x lines), MIX_FORGET_LIMIT dashed, aborted members marked with a red X", legend_size=8))
    drawn = tradeoff_axes(data)
    if drawn:
        made.append(save(*drawn, Path(out_dir) / "tradeoff.png",
                         "each member's drift against its sftHeld change at its end, coloured by configuration; "
                         "aborted members marked with a red X", legend_size=8))
    return made

"""The sweep page's plots, drawn like the run report's (tatu.pages.figures): the drift of each
configuration against the axis, and the trade-off, one point per member. A member that aborted
is marked on both with the run report's X in its configuration's colour (tatu.pages.figures.abort_mark):
its numbers are from its abort's eval, not an end. Configuration i is colour(i) on both plots."""
from __future__ import annotations

from pathlib import Path

from tatu.pages.figures import PlotFile, abort_mark, colour, new_axes, save
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
    index = {c.key: i for i, c in enumerate(data.compare.configs)}  # the colour tradeoff.png gives it
    seeds_label = "seeds (one dot per member)"
    for x, c in zip(xs, configs):
        d, states, own = c.stats["drift"], _states(c), colour(index[c.key])
        aborted_label = f"{c.key}: aborted member (its abort's eval)"
        for seed, value in d.per_seed.items():
            if states.get(seed) == "aborted":
                ax.plot([x], [value * 100], markersize=9, zorder=2, label=aborted_label, **abort_mark(own))
                aborted_label = None
            else:
                ax.plot([x], [value * 100], marker="o", color="0.6", markersize=4, linestyle="none", zorder=2,
                        label=seeds_label)
                seeds_label = None
        change = d.change
        ax.errorbar([x], [change.value * 100], yerr=[[(change.value - change.lo) * 100], [(change.hi - change.value) * 100]],
                    fmt="o", color=own, capsize=4, zorder=3)
        # its legend entry a plain line (tatu.pages.figures measures a Line2D's legend box, not an errorbar's)
        ax.plot([], [], marker="o", color=own, label=f"{c.key}: mean, 95% CI")
    limit = configs[0].effective.get("MIX_FORGET_LIMIT")
    if limit is not None:  # shared by every configuration: black, no configuration's colour
        ax.axhline(limit * 100, color="black", linestyle="--", label=f"MIX_FORGET_LIMIT {limit * 100:.0f}%")
    ax.set_xticks(xs, [c.values[axis] for c in configs])
    ax.set_xlabel(axis)
    ax.set_ylabel("enRuler drift at the end (%)")
    ax.set_title(f"{data.name}: drift vs {axis}")
    ax.grid(True, alpha=0.3)
    return fig, ax


def tradeoff_axes(data: SweepReport):
    """(figure, axes) of every member's drift against its sftHeld change; None without a member."""
    configs = [c for c in data.compare.configs if c.stats["drift"] and c.stats["sftHeld"]]
    if not configs:
        return None
    fig, ax = new_axes()
    index = {c.key: i for i, c in enumerate(data.compare.configs)}  # the colour drift_vs_axis.png gives it
    for c in configs:
        d, s, states, own = c.stats["drift"], c.stats["sftHeld"], _states(c), colour(index[c.key])
        seeds = [k for k in d.per_seed if k in s.per_seed]
        ax.plot([d.per_seed[k] * 100 for k in seeds], [s.per_seed[k] * 100 for k in seeds], marker="o",
                markersize=5, color=own, linestyle="none", label=c.key, zorder=3)
        stopped = [k for k in seeds if states.get(k) == "aborted"]
        if stopped:  # a hollow X around the configuration's dot, so both show
            ax.plot([d.per_seed[k] * 100 for k in stopped], [s.per_seed[k] * 100 for k in stopped],
                    markersize=15, zorder=2, label=f"{c.key}: aborted member (its abort's eval)",
                    **{**abort_mark(own), "markerfacecolor": "none", "markeredgecolor": own, "markeredgewidth": 1.5})
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
                         "(seeds x lines) in its configuration's colour, MIX_FORGET_LIMIT dashed black, aborted members marked with an X "
                         "in their configuration's colour", legend_size=8))
    drawn = tradeoff_axes(data)
    if drawn:
        made.append(save(*drawn, Path(out_dir) / "tradeoff.png",
                         "each member's drift against its sftHeld change at its end, coloured by configuration; "
                         "aborted members marked with a hollow X in their configuration's colour", legend_size=8))
    return made

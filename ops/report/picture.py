"""The report's first picture, learning against forgetting: each run is a path through its evals
in step order, x its enRuler drift and y its sftHeld change, both vs the run's own step 0. Below
0 the pairs were learned; right of the MIX_FORGET_LIMIT line the ruler forgot more than allowed.
An abort is marked where it stopped (the X of every plot, in its run's colour). The seeds of one
sweep configuration share its colour, each a thin path (ops/report/groups.py). Steps are written
beside the points once each (every path's step 0 is the origin; seeds that ended at one step share a
label) and moved apart where they would meet (tatu.pages.figures.separate)."""
from __future__ import annotations

from pathlib import Path

from tatu.ops.report.groups import RunGroup, group_runs
from tatu.ops.report.plots import LIMIT_OFF_SCALE, group_limits
from tatu.ops.report.runs import RunRecord, fmt_int, fmt_pct, number
from tatu.pages.figures import PlotFile, abort_mark, colour, new_axes, save

NAME = "learning_vs_forgetting.png"
LEARNED = "sftHeld"  # the set whose change is the learning (the SFT pairs held out)


def points(run: RunRecord) -> list[tuple[int, float, float]]:
    """(step, drift %, sftHeld change %) of every eval that has both."""
    out = []
    for record in run.evals:
        learned = record.changes.get(LEARNED)
        drift, change = number(record.drift.value), number(learned.value if learned else None)
        if drift is not None and change is not None:
            out.append((record.step, drift * 100, change * 100))
    return out


# a label written beside the points it names: (text, [(x, y), ...], colour)
Label = tuple[str, list[tuple[float, float]], str]


def _draw_run(ax, index: int, run: RunRecord, labels: list[Label]) -> list[float]:
    """One run's path, its first and last steps added to `labels`; its drifts (none: not drawn)."""
    path = points(run)
    if not path:
        return []
    steps, xs, ys = zip(*path)
    ax.plot(xs, ys, marker="o", markersize=3, color=colour(index), label=run.name, zorder=3)
    labels += [(f"step {steps[at]}", [(xs[at], ys[at])], colour(index)) for at in sorted({0, len(path) - 1})]
    if run.abort is not None:
        step, reason = run.abort
        at = max([i for i, s in enumerate(steps) if step is None or s <= step] or [len(path) - 1])
        ax.plot([xs[at]], [ys[at]], markersize=14, zorder=2, **abort_mark(colour(index)),
                label=f"{run.name} aborted at step {fmt_int(step)}: {reason}")
    return list(xs)


def _draw_group(ax, index: int, group: RunGroup, labels: list[Label]) -> list[float]:
    """A configuration's seeds: thin paths of its colour (one legend entry), aborts marked (one
    entry); the seeds that ended at one step get one label, beside their ends."""
    drifts, aborted, ends = [], [], {}
    for run, seed in zip(group.runs, group.seeds):
        path = points(run)
        if not path:
            continue
        steps, xs, ys = zip(*path)
        ax.plot(xs, ys, marker="o", markersize=2, linewidth=0.9, alpha=0.8, color=colour(index), zorder=3,
                label=f"{group.name}: seeds {', '.join(map(str, group.seeds))}, one thin path each" if not drifts else None)
        ends.setdefault(steps[-1], []).append((seed, xs[-1], ys[-1]))
        if run.abort is not None:
            step, _ = run.abort
            at = max([i for i, s in enumerate(steps) if step is None or s <= step] or [len(path) - 1])
            ax.plot([xs[at]], [ys[at]], markersize=11, zorder=2, **abort_mark(colour(index)))
            aborted.append(f"s{seed} at step {fmt_int(step)}")
        drifts += list(xs)
    for step, seeds in ends.items():
        labels.append((f"{', '.join(f's{seed}' for seed, _, _ in seeds)} step {step}", [(x, y) for _, x, y in seeds],
                       colour(index)))
    if aborted:
        ax.plot([], [], markersize=11, **abort_mark(colour(index)),
                label=f"{group.name}: {len(aborted)} of {len(group.runs)} seeds aborted ({', '.join(aborted)})")
    return drifts


def _write_labels(ax, labels: list[Label]) -> list:
    """Each label once (every path's "step 0" is the origin: one label there, in the first run's
    colour), right of the rightmost point it names, or left of the leftmost in the right third of
    the axes (a label is not in the layout: save() moves labels apart after it, so one must not run
    off the figure's edge); the annotations."""
    written, said = [], set()
    low, high = ax.get_xlim()
    for text, named, shade in labels:
        if (text, tuple(named)) in said:
            continue
        said.add((text, tuple(named)))
        left = max(x for x, _ in named) > low + (high - low) * 2 / 3
        x, y = min(named) if left else max(named)
        written.append(ax.annotate(text, (x, y), textcoords="offset points", xytext=(-10 if left else 6, 4), fontsize=7,
                                   color=shade, ha="right" if left else "left"))
    return written


def _draw_limits(ax, groups: list[RunGroup], drifts: list[float]) -> list[str]:
    """A vertical line per distinct MIX_FORGET_LIMIT; a note (in the caption) for one far right of the paths."""
    notes, reach = [], max([1.0, *(abs(d) for d in drifts)])
    for limit, members in group_limits(groups):
        label = f"MIX_FORGET_LIMIT {fmt_pct(limit)} ({', '.join(groups[i].name for i in members)})"
        if limit * 100 <= reach * LIMIT_OFF_SCALE:
            ax.axvline(limit * 100, color=colour(members[0]) if len(members) == 1 else "black", linestyle="--",
                       linewidth=1.2, label=label)
        else:
            notes.append(f"{label} is off to the right")
    return notes


def picture_axes(runs: list[RunRecord], groups: list[RunGroup] | None = None):
    """(figure, axes, notes) of the picture; None when no run has an eval with both numbers."""
    fig, ax = new_axes()
    groups = group_runs(runs) if groups is None else groups
    labels: list[Label] = []
    drifts = [d for index, group in enumerate(groups)
              for d in (_draw_group(ax, index, group, labels) if group.is_configuration
                        else _draw_run(ax, index, group.runs[0], labels))]
    if not drifts:
        return None
    _write_labels(ax, labels)
    notes = _draw_limits(ax, groups, drifts)
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.axvline(0, color="0.5", linewidth=0.8)
    ax.set_title("learning vs forgetting, one point per eval")
    ax.set_xlabel("enRuler drift vs step 0 (%): right = forgets English")
    ax.set_ylabel(f"{LEARNED} change vs step 0 (%): down = learns")
    ax.grid(True, alpha=0.3)
    return fig, ax, notes


def render_picture(runs: list[RunRecord], out_dir: Path, groups: list[RunGroup] | None = None) -> PlotFile | None:
    """learning_vs_forgetting.png in out_dir; None when there is nothing to draw."""
    drawn = picture_axes(runs, groups)
    if drawn is None:
        return None
    fig, ax, notes = drawn
    caption = (f"each run's {LEARNED} change against its enRuler drift at every eval, in step order (steps written at "
               "the paths' ends), MIX_FORGET_LIMIT dashed, aborts marked with an X in the run's colour"
               + "".join(f"; {note}" for note in notes))
    return save(fig, ax, Path(out_dir) / NAME, caption, notes, apart=list(ax.texts))

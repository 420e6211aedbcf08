"""The figures both reports draw: one width, one palette, one abort mark, object-oriented
matplotlib on the Agg canvas (no global pyplot state, so reports can be drawn side by side).

A legend is drawn below the axes, never on them (it would cover data wherever matplotlib's
"best" found room or not); the figure grows taller by the legend's rows, so the axes keep their
size. PlotFile records where the axes and the legend ended up, so tests can check they do not meet.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FIGSIZE = (7.0, 4.0)  # inches, before the legend's rows are added below
DPI = 100
PLOT_WIDTH = round(FIGSIZE[0] * DPI)  # every PNG's width in pixels; its height is PlotFile.size[1]
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
# what marks a run that stopped early (an abort), on every plot of either report
ABORT_MARK = {"marker": "X", "color": "red", "markeredgecolor": "black", "linestyle": "none"}
LEGEND_ROW_INCHES = 0.19  # one legend entry at 7-8 pt with matplotlib's default spacing, rounded up


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in the PNG's pixels, origin bottom left


@dataclass
class PlotFile:
    """One PNG written, with what its legend and axes say (so the page and tests can tell what was drawn)."""

    name: str
    caption: str
    legend: list[str]  # the legend's labels, in order
    notes: list[str]  # text written on the axes (limits too far above the curves to draw)
    yscale: str  # "log" or "linear", as the axes ended up
    size: tuple[int, int] = (PLOT_WIDTH, round(FIGSIZE[1] * DPI))  # the PNG's width, height in pixels
    axes_box: Box | None = None  # where the axes (the data) were drawn
    legend_box: Box | None = None  # where the legend was drawn; None without one


def new_axes():
    """(figure, axes) of the shared size, on its own Agg canvas, laid out so a legend fits outside."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _box(artist, renderer) -> Box:
    extent = artist.get_window_extent(renderer)
    return (float(extent.x0), float(extent.y0), float(extent.x1), float(extent.y1))


def save(fig, ax, path: Path, caption: str, notes: list[str] | None = None, legend_size: int = 7) -> PlotFile:
    """The legend drawn below the axes (one entry a row), the PNG written; what was drawn and where."""
    handles, labels = ax.get_legend_handles_labels()
    legend = None
    if labels:
        fig.set_figheight(FIGSIZE[1] + LEGEND_ROW_INCHES * len(labels) * legend_size / 7)
        legend = fig.legend(handles, labels, loc="outside lower center", fontsize=legend_size, ncols=1, frameon=False)
    fig.savefig(path, format="png", dpi=DPI)
    renderer = fig.canvas.get_renderer()
    width, height = fig.canvas.get_width_height()
    return PlotFile(name=Path(path).name, caption=caption, legend=labels, notes=notes or [], yscale=ax.get_yscale(),
                    size=(width, height), axes_box=_box(ax, renderer),
                    legend_box=_box(legend, renderer) if legend is not None else None)

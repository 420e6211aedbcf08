"""The figures both reports draw: one size, one palette, one abort mark, object-oriented
matplotlib on the Agg canvas (no global pyplot state, so reports can be drawn side by side)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FIGSIZE = (7.0, 4.0)
DPI = 100
PLOT_SIZE = (round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI))  # PNG width, height in pixels
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
# what marks a run that stopped early (an abort), on every plot of either report
ABORT_MARK = {"marker": "X", "color": "red", "markeredgecolor": "black", "linestyle": "none"}


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


@dataclass
class PlotFile:
    """One PNG written, with what its legend and axes say (so the page and tests can tell what was drawn)."""

    name: str
    caption: str
    legend: list[str]  # the legend's labels, in order
    notes: list[str]  # text written on the axes (limits too far above the curves to draw)
    yscale: str  # "log" or "linear", as the axes ended up


def new_axes():
    """(figure, axes) of the shared size, on its own Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def save(fig, ax, path: Path, caption: str, notes: list[str] | None = None, legend_size: int = 7) -> PlotFile:
    """The legend drawn, the PNG written at the shared size; what was drawn."""
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=legend_size, loc="best")
    fig.savefig(path, format="png", dpi=DPI)
    return PlotFile(name=Path(path).name, caption=caption, legend=ax.get_legend_handles_labels()[1], notes=notes or [],
                    yscale=ax.get_yscale())

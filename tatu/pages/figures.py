"""The figures both reports draw: one width, one palette, one abort mark, object-oriented
matplotlib on the Agg canvas (no global pyplot state, so reports can be drawn side by side).

A legend is drawn below the axes, never on them (it would cover data wherever matplotlib's
"best" found room or not); the figure grows taller by the legend's rows, so the axes keep their
size. PlotFile records where the axes and the legend ended up, so tests can check they do not meet.
Artists drawn with one label are one legend entry, drawn over each other (a mean line on its band).
Text written beside points (a path's steps) is moved apart until no two labels meet (separate).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

FIGSIZE = (7.0, 4.0)  # inches, before the legend's rows are added below
# a figure shown two to a row in the pages' 1200 px column (with its 1em margin): 2 x (580 + 16) <= 1200
PAIR_FIGSIZE = (5.8, 3.4)
DPI = 100
PLOT_WIDTH = round(FIGSIZE[0] * DPI)  # a full-width PNG's width in pixels; its height is PlotFile.size[1]
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def abort_mark(colour: str) -> dict:
    """What marks a run that stopped early (an abort), on every plot of either report: a black-edged
    X (a shape no other mark has) filled with its run's or configuration's colour."""
    return {"marker": "X", "color": colour, "markeredgecolor": "black", "linestyle": "none"}

LEGEND_ROW_INCHES = 0.19  # one legend entry at 7-8 pt with matplotlib's default spacing, rounded up


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in the PNG's pixels, origin bottom left
# A legend's label wider than the figure would be cut at both edges (the legend is centred), its
# marker with it: labels wrap at this many characters, fewer while the legend is still too wide.
LEGEND_WRAP_CHARS = 100
LEGEND_MARGIN_PX = 4  # room kept between the legend and the figure's edges


@dataclass(frozen=True)
class LegendEntry:
    """One legend entry as drawn: its label and where its marker (handle) and its text ended up,
    in the PNG's pixels with the origin top left (as a browser addresses an image's pixels)."""

    label: str
    marker: Box
    text: Box

    def to_json(self) -> dict:
        return {"label": self.label, "marker": list(self.marker), "text": list(self.text)}


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
    legend_entries: tuple[LegendEntry, ...] = ()  # each entry's marker and text, top-left origin
    bands: tuple[str, ...] = field(default=())  # the fill colour (#rrggbb) of every CI band on the axes, as drawn


def new_axes(figsize: tuple[float, float] = FIGSIZE):
    """(figure, axes) of the shared size (PAIR_FIGSIZE: two to a row), on its own Agg canvas, laid
    out so a legend fits outside."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


LABEL_GAP_PX = 2  # room kept between two labels written beside points


def separate(fig, texts) -> None:
    """Move labels written beside points (annotations with an offset) down, one after another,
    until none meets another: labels of points close together (seeds ending near each other, every
    path's step 0 at the origin) would otherwise print over each other."""
    renderer = fig.canvas.get_renderer()
    placed = []
    for text in texts:
        for _ in range(len(placed) + 1):
            box = text.get_window_extent(renderer)
            hit = next((other for other in placed if box.overlaps(other)), None)
            if hit is None:
                break
            dx, dy = text.xyann  # offset points: move below what it met
            text.xyann = (dx, dy - (box.y1 - hit.y0 + LABEL_GAP_PX) * 72 / fig.dpi)
        placed.append(text.get_window_extent(renderer))


def _box(artist, renderer) -> Box:
    extent = artist.get_window_extent(renderer)
    return (float(extent.x0), float(extent.y0), float(extent.x1), float(extent.y1))


def _top_left(box: Box, height: float) -> Box:
    return (box[0], height - box[3], box[2], height - box[1])


def _band_colours(ax) -> tuple[str, ...]:
    """The face colour of every filled area (fill_between: a CI band) on the axes, read from the artists."""
    from matplotlib.collections import FillBetweenPolyCollection, PolyCollection
    from matplotlib.colors import to_hex

    return tuple(to_hex(c.get_facecolor()[0], keep_alpha=False) for c in ax.collections
                 if isinstance(c, (PolyCollection, FillBetweenPolyCollection)) and len(c.get_facecolor()))


def _fit_legend(fig, handles, labels: list[str], legend_size: int):
    """The legend below the axes, its labels wrapped until it is narrower than the figure and the
    figure grown until its last row is inside it (measured, not estimated)."""
    width_px = fig.get_figwidth() * fig.dpi
    wrap = LEGEND_WRAP_CHARS
    fig.set_figheight(fig.get_figheight() + LEGEND_ROW_INCHES * len(labels) * legend_size / 7)
    for _ in range(12):
        shown = ["\n".join(textwrap.wrap(label, wrap, break_long_words=True)) or label for label in labels]
        legend = fig.legend(handles, shown, loc="outside lower center", fontsize=legend_size, ncols=1, frameon=False)
        renderer = fig.canvas.get_renderer()
        fig.draw_without_rendering()
        box = legend.get_window_extent(renderer)
        if box.width > width_px - 2 * LEGEND_MARGIN_PX and wrap > 20:
            legend.remove()
            wrap = int(wrap * 0.85)
            continue
        if box.y0 < LEGEND_MARGIN_PX:  # rows below the figure's bottom: grow it by what is missing
            legend.remove()
            fig.set_figheight(fig.get_figheight() + (LEGEND_MARGIN_PX - box.y0) / fig.dpi + 0.05)
            continue
        return legend
    return legend


def _entries(ax) -> tuple[list, list[str]]:
    """The legend's (handles, labels): artists drawn with one label are one entry, a tuple of their
    handles that the legend draws over each other, in the order the labels first came."""
    by_label: dict[str, list] = {}
    for handle, label in zip(*ax.get_legend_handles_labels()):
        by_label.setdefault(label, []).append(handle)
    return [h[0] if len(h) == 1 else tuple(h) for h in by_label.values()], list(by_label)


def save(fig, ax, path: Path, caption: str, notes: list[str] | None = None, legend_size: int = 7,
         apart=()) -> PlotFile:
    """The legend drawn below the axes (one entry a row), the labels in `apart` moved apart once the
    layout is final (separate), the PNG written; what was drawn and where."""
    handles, labels = _entries(ax)
    legend = _fit_legend(fig, handles, labels, legend_size) if labels else None
    if apart:
        for text in apart:
            text.set_in_layout(False)  # a label moved must not move the axes it was placed on
        fig.draw_without_rendering()
        separate(fig, apart)
    fig.savefig(path, format="png", dpi=DPI)
    renderer = fig.canvas.get_renderer()
    width, height = fig.canvas.get_width_height()
    entries = ()
    if legend is not None:
        entries = tuple(LegendEntry(label, _top_left(_box(handle, renderer), height), _top_left(_box(text, renderer), height))
                        for label, handle, text in zip(labels, legend.legend_handles, legend.get_texts()))
    return PlotFile(name=Path(path).name, caption=caption, legend=labels, notes=notes or [], yscale=ax.get_yscale(),
                    size=(width, height), axes_box=_box(ax, renderer),
                    legend_box=_box(legend, renderer) if legend is not None else None,
                    legend_entries=entries, bands=_band_colours(ax))

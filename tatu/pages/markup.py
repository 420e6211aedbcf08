"""The HTML both reports write: one page shell and style, escaped tables, figures embedded.

A page is opened straight from disk in a browser, so it is one file: each PNG is embedded
(base64) and linked to its file beside the page. Long lines wrap and wide tables scroll inside
the page's width instead of pushing it wider (a sweep's verdict line is one long sentence). A
figure is as wide as its image, so two drawn at PAIR_FIGSIZE stand side by side. A long table a
reader opens for one run is folded (`folded`): its numbers are in the page, behind a one-line summary.
"""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from tatu.pages.figures import PlotFile

STYLE = """body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}
td.num{text-align:right;font-family:monospace}th{background:#f3f3f3}th.block{text-align:left;background:#e8eef6}
figure{display:inline-block;vertical-align:top;margin:0 1em 1em 0}
.scroll{max-width:100%;overflow-x:auto}pre,.verdict{white-space:pre-wrap;overflow-wrap:anywhere}
img{max-width:100%;height:auto}.verdict-sentence{margin:.4em 0}.ci-covers{color:#555;font-size:.9em}
.absent{color:#555}details{margin:.2em 0}summary{cursor:pointer}"""


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def text_cell(text) -> str:
    return f"<td>{esc(text)}</td>"


def table(header: list[str], rows: list[str], table_id: str) -> str:
    """A table of pre-rendered rows (`<tr>...</tr>`), its header escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "\n".join(rows)
    return f'<table id="{table_id}">\n<tr>{head}</tr>\n{body}\n</table>'


def plain_table(header: list[str], rows: list[list[str]], table_id: str) -> str:
    """A table of plain text cells, in a box that scrolls sideways when it is wider than the page."""
    return f'<div class="scroll">{table(header, ["<tr>" + "".join(text_cell(c) for c in r) + "</tr>" for r in rows], table_id)}</div>'


def figures(plots: list[PlotFile], out_dir: Path) -> str:
    """Each PNG embedded and linked to its file, with its caption. The img carries where its legend's
    entries were drawn and its bands' colours (data-legend, data-bands), so a browser test can look
    at those pixels of the decoded image (tests/browser.py)."""
    parts = []
    for plot in plots:
        data = base64.b64encode((Path(out_dir) / plot.name).read_bytes()).decode("ascii")
        drawn = (f' data-name="{esc(plot.name)}" data-legend="{esc(json.dumps([e.to_json() for e in plot.legend_entries]))}"'
                 f' data-bands="{esc(json.dumps(list(plot.bands)))}"')
        parts.append(f'<figure style="max-width:{plot.size[0]}px"><a href="{esc(plot.name)}"><img src="data:image/png;base64,{data}" '
                     f'width="{plot.size[0]}" height="{plot.size[1]}"{drawn} alt="{esc(plot.caption)}"></a>'
                     f'<figcaption>{esc(plot.caption)} (<a href="{esc(plot.name)}">{esc(plot.name)}</a>)</figcaption></figure>')
    return "\n".join(parts)


def folded(summary: str, body: str) -> str:
    """A part of the page shown by its one-line summary and opened with a click."""
    return f"<details><summary>{esc(summary)}</summary>{body}</details>"


def page(title: str, sections: list[str]) -> str:
    """The whole document: the shared head and style, the title as its heading, the sections."""
    return "\n".join(["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
                      f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>",
                      f"<h1>{esc(title)}</h1>", *sections, "</body></html>", ""])

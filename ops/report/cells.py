"""The report's HTML cells: each number cell carries its path in the events, its kind and its
raw value, so the page can be checked against the events cell by cell."""
from __future__ import annotations

import json

from tatu.ops.report.runs import FORMATS, fmt_ppl
from tatu.pages.markup import esc


def cell(value, kind: str, path: str, set_name: str = "") -> str:
    """A number cell: its text, and where it came from with the raw value for checking."""
    text = fmt_ppl(value, set_name) if kind == "ppl" else FORMATS[kind](value)
    return (f'<td class="num" data-path="{esc(path)}" data-kind="{kind}" '
            f'data-value="{esc(json.dumps(value))}">{esc(text)}</td>')


def row(cells: str, run: str | None = None, title: str | None = None) -> str:
    """A table row; data-run names the run its numbers belong to."""
    attrs = (f' data-run="{esc(run)}"' if run is not None else "") + (f' title="{esc(title)}"' if title else "")
    return f"<tr{attrs}>{cells}</tr>"

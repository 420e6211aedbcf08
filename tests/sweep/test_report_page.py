"""The sweep page in the run report's look: the shared shell and style (tatu.pages), every table
of the closing text, the verdict wrapping inside the page, aborted members marked on the plots.

The analysis numbers are made up here (the page only renders them; test_common_step.py checks
the numbers of a real sweep): two configurations, three seeds each, two of the first aborted."""
from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser

from page_world import ABORTED, CHANGE, DRIFT, sweep_data
from tatu.pages.markup import STYLE
from tatu.sweep.report.page import write_page
from tatu.sweep.report.plots import drift_axes, render_plots, tradeoff_axes
from tatu.sweep.report.tables import closing_text

class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.styles, self.tables, self.verdict, self._in = [], [], None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append(attrs.get("id"))
        if tag in ("style", "pre"):
            self._in = tag if tag == "style" or attrs.get("class") == "verdict" else None

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "style":
            self.styles.append(data)
        elif self._in == "pre":
            self.verdict = (self.verdict or "") + data


def _rules(css: str) -> dict[str, str]:
    return {sel.strip(): body for sels, body in re.findall(r"([^{}]+)\{([^}]*)\}", css) for sel in sels.split(",")}


def test_the_page_has_the_shared_look_every_table_and_a_verdict_that_wraps(tmp_path):
    data = sweep_data()
    text = closing_text(data)
    index = write_page(data, text, render_plots(data, tmp_path), tmp_path)
    parsed = _Page()
    parsed.feed(index.read_text(encoding="utf-8"))
    assert parsed.styles == [STYLE]  # the run report's style, and no other
    assert parsed.tables == ["configs"]  # no baseline pairing or common step in these numbers: said, not tabled
    html_text = index.read_text(encoding="utf-8")
    # the answer first, as in the run report: the verdict, then the plots, then the tables
    assert html_text.index('id="verdict"') < html_text.index("<img") < html_text.index("<table")
    # the verdict block of the closing text, whole, in an element that wraps within the page's width
    assert parsed.verdict == text.split("\n\n")[-1] and data.verdict.line in parsed.verdict
    rules = _rules(STYLE)
    assert "white-space:pre-wrap" in rules[".verdict"] and "overflow-wrap:anywhere" in rules[".verdict"]
    assert "max-width:1200px" in rules["body"] and "overflow-x:auto" in rules[".scroll"]
    assert index.read_text().count('<div class="scroll"><table') == len(parsed.tables)
    assert 'src="data:image/png;base64,' in index.read_text() and {p.name for p in render_plots(data, tmp_path)} == {
        "drift_vs_axis.png", "tradeoff.png"}


def _marked(ax) -> set[tuple[float, float]]:
    """The points drawn with the abort mark (an X)."""
    return {(round(x, 6), round(y, 6)) for line in ax.get_lines() if line.get_marker() == "X"
            for x, y in zip(line.get_xdata(), line.get_ydata())}


def test_aborted_members_and_only_they_are_marked_on_both_plots():
    data = sweep_data()
    _, ax = tradeoff_axes(data)
    expected = {(round(DRIFT[k][s] * 100, 6), round(CHANGE[k][s] * 100, 6)) for k, s in ABORTED}
    assert _marked(ax) == expected
    assert ax.get_legend_handles_labels()[1].count("aborted member (its abort's eval)") == 1
    _, ax = drift_axes(data)
    assert _marked(ax) == {(0.0, round(DRIFT[k][s] * 100, 6)) for k, s in ABORTED}
    first, *rest = data.compare.configs
    done = dataclasses.replace(first, results=tuple(dataclasses.replace(r, state="done") for r in first.results))
    data = dataclasses.replace(data, compare=dataclasses.replace(data.compare, configs=(done, *rest)))
    assert _marked(tradeoff_axes(data)[1]) == set() and _marked(drift_axes(data)[1]) == set()

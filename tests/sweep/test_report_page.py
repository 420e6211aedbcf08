"""The sweep page in the run report's look: the shared shell and style (tatu.pages), every table
of the closing text, the verdict wrapping inside the page, aborted members marked on the plots.

The analysis numbers are made up here (the page only renders them; test_common_step.py checks
the numbers of a real sweep): two configurations, three seeds each, two of the first aborted."""
from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser

from page_world import ABORTED, CHANGE, DRIFT, sweep_data
from matplotlib.colors import to_hex

from tatu.pages.figures import colour
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
    # the question and its locked rule first, then the answer: the verdict, the plots, the tables
    assert (html_text.index('id="question"') < html_text.index("Locked rule") < html_text.index('id="verdict"')
            < html_text.index("<img") < html_text.index("<table"))
    assert html_text.count(data.question) == 1
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


def _check_colours(ax, data) -> None:
    """Every legend entry of a configuration ("KEY" or "KEY: ...") in that configuration's colour(i),
    its X's face or (hollow) edge included; no red X on another configuration."""
    for i, c in enumerate(data.compare.configs):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label.split(":")[0] != c.key:
                continue
            line = handle.lines[0] if hasattr(handle, "lines") else handle  # an errorbar's container
            drawn = {to_hex(line.get_color()), to_hex(line.get_markeredgecolor()) if line.get_marker() == "X" else None}
            assert colour(i) in drawn and not drawn - {colour(i), None, "#000000"}, (label, drawn, colour(i))


def test_aborted_members_and_only_they_are_marked_on_both_plots():
    data = sweep_data()
    _, ax = tradeoff_axes(data)
    expected = {(round(DRIFT[k][s] * 100, 6), round(CHANGE[k][s] * 100, 6)) for k, s in ABORTED}
    assert _marked(ax) == expected
    labels = ax.get_legend_handles_labels()[1]
    aborted = {k for k, _ in ABORTED}
    assert sorted(l for l in labels if "aborted" in l) == [f"{k}: aborted member (its abort's eval)" for k in sorted(aborted)]
    _check_colours(ax, data)
    _, ax = drift_axes(data)
    assert _marked(ax) == {(0.0, round(DRIFT[k][s] * 100, 6)) for k, s in ABORTED}
    _check_colours(ax, data)
    labels = ax.get_legend_handles_labels()[1]
    assert "seeds (one dot per member)" in labels and all(f"{c.key}: mean, 95% CI" in labels for c in data.compare.configs)
    assert "(grey" not in ax.get_title() and "blue" not in ax.get_title()
    limit = [line for line in ax.get_lines() if line.get_label().startswith("MIX_FORGET_LIMIT")]
    assert limit and all(to_hex(line.get_color()) == "#000000" for line in limit)
    first, *rest = data.compare.configs
    done = dataclasses.replace(first, results=tuple(dataclasses.replace(r, state="done") for r in first.results))
    data = dataclasses.replace(data, compare=dataclasses.replace(data.compare, configs=(done, *rest)))
    assert _marked(tradeoff_axes(data)[1]) == set() and _marked(drift_axes(data)[1]) == set()

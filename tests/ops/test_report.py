"""`tatu report`: every number on the page equals events.jsonl, the PNGs render, the page links them."""
from __future__ import annotations

import base64
import html
import json
import re
import struct
from html.parser import HTMLParser
from pathlib import Path

import pytest

from page_world import BASE_CONFIG, CRITERIA, change_point, eval_event, report_runs, write_run
from run_records import verdict
from tatu.exitcodes import BAD_DATA, TatuExit
from tatu.ops import cli
from tatu.ops.report import page as report
from tatu.pages.figures import PAIR_FIGSIZE

PLOTS = ("sftHeld.png", "ptVal.png", "enRuler.png", "drift.png")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return report_runs(tmp_path_factory.mktemp("runs"))


class _Cells(HTMLParser):
    """Every number cell (data-path) with its row's run, and every href/src."""

    def __init__(self):
        super().__init__()
        self.cells, self.links, self.rows = [], [], []
        self._run, self._cell, self._texts = None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr":
            self._run = a.get("data-run")
            self.rows.append({"run": self._run, "texts": []})
        if tag == "td":
            self._cell = a
            self._texts = []
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if tag == "img":
            self.links.append(a["src"])

    def handle_data(self, data):
        if self._texts is not None:
            self._texts.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            text = "".join(self._texts)
            if self.rows:
                self.rows[-1]["texts"].append(text)
            if "data-path" in self._cell:
                self.cells.append({"run": self._run, "path": self._cell["data-path"], "kind": self._cell["data-kind"],
                                   "value": json.loads(self._cell["data-value"]), "text": text})
            self._cell, self._texts = None, None


def _parse(index: Path) -> _Cells:
    parser = _Cells()
    parser.feed(index.read_text(encoding="utf-8"))
    return parser


def _naive_events(run_dir: Path) -> tuple[dict[int, dict], dict | None]:
    """Independent reading: every whole line, the later eval of a step replacing the earlier."""
    evals, verdict = {}, None
    for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").split("\n"):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event["event"] == "eval":
            evals[event["step"]] = event
        elif event["event"] == "verdict":
            verdict = event
    return evals, verdict


def _resolve(path: str, evals: dict[int, dict], verdict: dict | None):
    parts = path.split("/")
    node = evals[int(parts[1])] if parts[0] == "eval" else verdict
    for key in parts[2:] if parts[0] == "eval" else parts[1:]:
        node = node[key]
    return node


def _naive_text(kind: str, value, path: str) -> str:
    if kind == "ppl":
        return f"{value:.4f}" if "/sftHeld/" in path else f"{value:.2f}"
    if kind == "pct":
        return f"{value * 100:+.1f}%"
    if kind == "rate":
        return f"{value * 100:.1f}%"
    if kind == "p":
        return "<0.001" if value < 0.001 else f"{value:.3f}"
    return str(value)


def test_every_number_on_the_page_equals_events_jsonl(runs):
    cells = _parse(runs["index"]).cells
    by_run = {"sft-noreplay": _naive_events(runs["finished"]), "sft-replay": _naive_events(runs["running"])}
    assert len(cells) > 60
    for cell in cells:
        evals, verdict = by_run[cell["run"]]
        assert cell["value"] == _resolve(cell["path"], evals, verdict), cell
        assert cell["text"] == _naive_text(cell["kind"], cell["value"], cell["path"]), cell


def test_every_eval_number_is_on_the_page_and_a_replaced_eval_is_not(runs):
    cells = _parse(runs["index"]).cells
    shown = {(c["run"], c["path"]): c["value"] for c in cells}
    for name, run_dir in (("sft-noreplay", runs["finished"]), ("sft-replay", runs["running"])):
        evals, _ = _naive_events(run_dir)
        for step, event in evals.items():
            for set_name in ("sftHeld", "ptVal", "enRuler"):
                for key in ("ppl", "lo", "hi"):
                    assert shown[(name, f"eval/{step}/sets/{set_name}/{key}")] == event["sets"][set_name][key]
            for key in ("value", "lo", "hi"):
                assert shown[(name, f"eval/{step}/drift/{key}")] == event["drift"][key]
        final = evals[max(evals)]
        for key in ("value", "lo", "hi", "p_value", "mde"):
            assert shown[(name, f"eval/{max(evals)}/drift/{key}")] == final["drift"][key]
            assert shown[(name, f"eval/{max(evals)}/changes/sftHeld/{key}")] == final["changes"]["sftHeld"][key]
        assert shown[(name, f"eval/{max(evals)}/generations/accuracy/value")] == final["generations"]["accuracy"]["value"]
        assert shown[(name, f"eval/{max(evals)}/generations/invented/rate")] == final["generations"]["invented"]["rate"]
    assert shown[("sft-noreplay", "eval/8/sets/sftHeld/ppl")] == 8.22227  # the later eval of step 8
    superseded = runs["superseded"]["sets"]["sftHeld"]["ppl"]
    assert superseded not in {c["value"] for c in cells}
    assert shown[("sft-noreplay", "verdict/numbers/drift/value")] == 0.0806


def test_displayed_formats_match_the_eval_line(runs):
    texts = {(c["run"], c["path"]): c["text"] for c in _parse(runs["index"]).cells}
    assert texts[("sft-noreplay", "eval/8/sets/sftHeld/ppl")] == "8.2223"
    assert texts[("sft-noreplay", "eval/8/sets/enRuler/ppl")] == "56.30"
    assert texts[("sft-noreplay", "eval/8/drift/value")] == "+8.1%"
    assert texts[("sft-noreplay", "eval/8/drift/p_value")] == "<0.001"
    assert texts[("sft-replay", "eval/4/generations/invented/rate")] == "5.0%"
    assert texts[("sft-noreplay", "eval/8/drift/mde")] == "0.8%"  # a magnitude: no sign


def test_rows_are_not_nested(runs):
    page = runs["index"].read_text(encoding="utf-8")
    assert page.count("<tr") == page.count("</tr>") > 20
    assert not re.search(r"<tr[^>]*>\s*<tr", page)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, chunk = struct.unpack(">I4s", data[8:16])
    assert chunk == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


def test_pngs_render_at_the_expected_size_and_the_page_references_them(runs):
    parsed = _parse(runs["index"])
    # drawn two to a row (tatu.pages.figures.PAIR_FIGSIZE)
    expected = (round(PAIR_FIGSIZE[0] * report.DPI), round(PAIR_FIGSIZE[1] * report.DPI))
    embedded = [base64.b64decode(link.split(",", 1)[1]) for link in parsed.links if link.startswith("data:image/png;base64,")]
    for name in PLOTS:
        data = (runs["out"] / name).read_bytes()
        assert len(data) > 5000, name  # axes, two curves, bands: not a blank image
        # the shared width; the base height plus the legend's rows below the axes
        width, height = _png_size(data)
        assert width == expected[0] == 580 and height > expected[1] == 340, (name, width, height)
        # the page gives the browser the PNG's own size (not the base one, which would squash it)
        figure = re.search(rf'<figure[^>]*><a href="{re.escape(name)}"><img [^>]*>', runs["index"].read_text()).group(0)
        assert f'width="{width}" height="{height}"' in figure, figure
        assert name in parsed.links
        assert data in embedded  # self-contained: the same image is inside the page


def test_a_run_without_a_verdict_is_reported_as_still_running(runs):
    rows = [r for r in _parse(runs["index"]).rows if r["run"] == "sft-replay" and r["texts"]]
    verdict_row = rows[0]
    assert "no verdict" in " ".join(verdict_row["texts"])
    assert "running" in verdict_row["texts"][1]
    finished = [r for r in _parse(runs["index"]).rows if r["run"] == "sft-noreplay" and r["texts"]][0]
    assert finished["texts"][2] == "forgets" and finished["texts"][3].startswith("VERDICT forgets")


def test_config_table_shows_only_the_keys_that_differ(runs):
    page = runs["index"].read_text(encoding="utf-8")
    table = re.search(r'<table id="config-diff">(.*?)</table>', page, re.S).group(1)
    assert "<td>REPLAY_N</td><td>(unset)</td><td>6</td>" in table
    assert "<td>MIX_FORGET_LIMIT</td><td>0.1</td><td>10.0</td>" in table
    assert "TATU_SEED" not in table and "SFT_GE" not in table


def test_generations_are_shown_escaped(runs):
    page = runs["index"].read_text(encoding="utf-8")
    assert "&lt;b&gt;4&lt;/b&gt; &amp; mais" in page and "<b>4</b>" not in page
    assert "Brasília" in page


def test_torn_last_line_and_repeated_step(runs):
    record = report.load_run(runs["finished"])
    assert [e.step for e in record.evals] == [0, 4, 8]
    assert record.evals[-1].sets["enRuler"].ppl == 56.3
    assert record.last_step == 4 and record.resumes == 1
    assert record.best_eval.step == 4  # the replacing step-8 eval is not best
    assert record.forget_limit == 0.1


def test_unknown_config_and_default_out_dir(tmp_path, capsys):
    run_dir = write_run(tmp_path / "lonely", [eval_event(0, 9.0, 31.0, 52.0, 0.0, True)], config=None)
    assert cli.main(["report", str(run_dir)]) == 0
    page = (run_dir / "report" / "index.html").read_text(encoding="utf-8")
    assert "lonely: config unknown" in page
    assert "no verdict" in page
    assert str(run_dir / "report" / "index.html") in capsys.readouterr().out


def test_missing_events_is_a_one_line_bad_data_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli.main(["report", str(tmp_path / "empty")]) == BAD_DATA
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "events.jsonl" in err and str(tmp_path / "empty") in err


def test_an_eval_event_without_drift_names_the_file(tmp_path):
    broken = eval_event(4, 9.0, 31.0, 52.0, 0.0, True)
    del broken["drift"]
    run_dir = write_run(tmp_path / "broken", [eval_event(0, 9.0, 31.0, 52.0, 0.0, True), broken], config=None)
    with pytest.raises(TatuExit) as exc:
        report.load_run(run_dir)
    assert exc.value.code == BAD_DATA
    assert "events.jsonl" in exc.value.message and "step 4" in exc.value.message and "drift" in exc.value.message


def test_a_malformed_verdict_event_names_the_file_and_the_event(tmp_path):
    """The verdict is read as the daemon's Verdict record: one it cannot read is one BAD_DATA line."""
    events = _aborted_events("x")
    del events[-1]["criteria"]
    run_dir = write_run(tmp_path / "no-criteria", events, config=None)
    with pytest.raises(TatuExit) as exc:
        report.load_run(run_dir)
    assert exc.value.code == BAD_DATA and "\n" not in exc.value.message
    assert f"{run_dir / 'events.jsonl'}: verdict event #{len(events)}: malformed (KeyError: 'criteria')" == exc.value.message


def _table_html(page: str, table_id: str) -> str:
    return re.search(rf'<table id="{re.escape(table_id)}">(.*?)</table>', page, re.S).group(1)


def test_verdict_table_shows_the_unjudged_ptval_change_and_says_what_the_verdict_covers(runs):
    page = runs["index"].read_text(encoding="utf-8")
    verdicts = _parse_fragment(_table_html(page, "verdicts"))
    shown = {(c["run"], c["path"]): c for c in verdicts.cells}
    evals, _ = _naive_events(runs["finished"])
    ptval = shown[("sft-noreplay", "eval/8/changes/ptVal/value")]
    assert ptval["value"] == evals[8]["changes"]["ptVal"]["value"] == 0.01 and ptval["text"] == "+1.0%"
    assert ("sft-noreplay", "verdict/numbers/sftHeld_change/value") in shown
    assert ("sft-noreplay", "verdict/numbers/drift/value") in shown
    scope = re.search(r'<ul id="verdict-scope">(.*?)</ul>', page, re.S).group(1)
    assert ("sft-noreplay: the verdict covers the sftHeld change vs step 0 and the English ruler (enRuler drift) only; "
            "ptVal is shown but not judged") in scope
    assert "sft-replay" not in scope  # no verdict yet: nothing to scope


def _parse_fragment(fragment: str) -> _Cells:
    parser = _Cells()
    parser.feed(fragment)
    return parser


def test_ppl_plots_are_log_scaled_and_the_best_star_names_the_set_it_was_chosen_by(runs, tmp_path):
    records = [report.load_run(runs["finished"]), report.load_run(runs["running"])]
    plots = {p.name: p for p in report.render_plots(records, tmp_path)}
    assert set(plots) == set(PLOTS)
    for name in ("sftHeld.png", "ptVal.png", "enRuler.png"):
        assert plots[name].yscale == "log", name
        # step 4 is the last eval flagged best in the events (the replacing step-8 eval is not)
        assert "sft-noreplay best (by sftHeld, step 4)" in plots[name].legend, plots[name].legend
    assert plots["drift.png"].yscale == "linear"  # drift crosses 0: no log scale
    assert not any("aborted" in label for p in plots.values() for label in p.legend)


def _aborted_events(reason, with_abort_event=True, best_set="sftHeld", judged="sftHeld"):
    evals = [eval_event(0, 9.0, 31.0, 52.0, 0.0, True), eval_event(4, 8.5, 31.5, 60.0, 0.15, True)]
    for event in evals:
        event["best_set"] = best_set
    evals[-1]["abort"] = reason
    events = evals + ([{"event": "abort", "time": 5.0, "step": 4, "reason": reason}] if with_abort_event else [])
    events.append({"event": "verdict", "time": 6.0, "step": 4, "verdict": "forgets", "line": f"VERDICT forgets (aborted: {reason})",
                   "numbers": {"step": 4, f"{judged}_change": change_point(-0.05), "drift": change_point(0.15),
                               "drift_tronco": change_point(0.2), "worst_drift": 0.15, "worst_drift_step": 4, "aborted": reason},
                   "criteria": CRITERIA})
    return events


def test_an_aborted_run_is_marked_on_every_plot_and_on_the_page(tmp_path):
    reason = "drift +15.0% > MIX_FORGET_LIMIT 10.0%"
    by_event = write_run(tmp_path / "by-event", _aborted_events(reason), BASE_CONFIG)
    by_verdict = write_run(tmp_path / "by-verdict", _aborted_events(reason, with_abort_event=False), BASE_CONFIG)
    # a non-finite loss aborts between evals and leaves no verdict: the marker goes at the abort step
    nan_loss = write_run(tmp_path / "nan-loss", [
        eval_event(0, 9.0, 31.0, 52.0, 0.0, True), eval_event(4, 8.7, 31.1, 52.5, 0.01, True),
        {"event": "abort", "time": 7.0, "step": 6, "reason": "non-finite loss", "loss": "nan"},
    ], BASE_CONFIG)
    records = [report.load_run(d) for d in (by_event, by_verdict, nan_loss)]
    assert [r.abort for r in records] == [(4, reason), (4, reason), (6, "non-finite loss")]
    assert records[0].status == f"aborted at step 4: {reason}"
    assert records[2].status == "diverged at step 6: non-finite loss (no verdict)"
    for plot in report.render_plots(records, tmp_path / "plots"):
        assert f"by-event aborted at step 4: {reason}" in plot.legend, plot.name
        assert f"by-verdict aborted at step 4: {reason}" in plot.legend, plot.name
        assert "nan-loss aborted at step 6: non-finite loss" in plot.legend, plot.name
    page = report.build_report([by_event, by_verdict, nan_loss], tmp_path / "out").read_text(encoding="utf-8")
    rows = [r for r in _parse(tmp_path / "out" / "index.html").rows if r["texts"]]
    status = {r["run"]: r["texts"][1] for r in rows[:3]}
    assert status == {"by-event": f"aborted at step 4: {reason}", "by-verdict": f"aborted at step 4: {reason}",
                      "nan-loss": "diverged at step 6: non-finite loss (no verdict)"}
    assert "aborts marked with an X in the run's colour" in html.unescape(page)
    # each run's X is filled with its own line's colour, not one red for every run
    from matplotlib.colors import to_hex
    from tatu.ops.report.picture import picture_axes

    _, ax, _ = picture_axes(records)
    line_colour = {line.get_label(): to_hex(line.get_color()) for line in ax.get_lines() if line.get_marker() == "o"}
    marks = {line.get_label().split(" aborted")[0]: to_hex(line.get_markerfacecolor())
             for line in ax.get_lines() if line.get_marker() == "X"}
    assert marks == {name: line_colour[name] for name in ("by-event", "by-verdict", "nan-loss")}
    assert len(set(marks.values())) == 3


def test_a_run_that_did_not_abort_has_no_abort():
    from tatu.daemon.run.view import FINISHED, RunView

    view = RunView(Path("ok"), FINISHED, FINISHED, 8, None, None, 0, None, verdict("holds"), None, None, verdict_step=8)
    record = report.RunRecord(name="ok", run_dir=Path("ok"), view=view)
    assert record.abort is None and record.status == "finished"


def test_a_trunk_verdict_covers_ptval_and_leaves_sftheld_unjudged(tmp_path):
    trunk = write_run(tmp_path / "trunk", _aborted_events("x", best_set="ptVal", judged="ptVal"),
                       {"TATU_MODE": "trunk"})
    page = report.build_report([trunk], tmp_path / "out").read_text(encoding="utf-8")
    shown = {c["path"] for c in _parse_fragment(_table_html(page, "verdicts")).cells}
    assert {"verdict/numbers/ptVal_change/value", "eval/4/changes/sftHeld/value"} <= shown
    assert "trunk: the verdict covers the ptVal change vs step 0 and the English ruler (enRuler drift) only; sftHeld is" in page
    legend = report.render_plots([report.load_run(trunk)], tmp_path / "plots")[0].legend
    assert "trunk best (by ptVal, step 4)" in legend


def _drift_legend(runs_dirs, tmp_path):
    plots = report.render_plots([report.load_run(d) for d in runs_dirs], tmp_path)
    drift = next(p for p in plots if p.name == "drift.png")
    limits = [label for label in drift.legend if "MIX_FORGET_LIMIT" in label and "aborted" not in label]
    assert set(drift.notes) <= set(limits)  # a note is written in the legend, off the axes
    return [label for label in limits if label not in drift.notes], drift.notes


def test_runs_sharing_a_forget_limit_get_one_limit_line(tmp_path):
    # drift near the limits, so both lines are drawn rather than written as "above the plot"
    events = [eval_event(0, 9.0, 31.0, 52.0, 0.0, True), eval_event(4, 8.5, 31.5, 59.0, 0.08, True)]
    a = write_run(tmp_path / "a", events, BASE_CONFIG)
    b = write_run(tmp_path / "b", events, BASE_CONFIG)
    c = write_run(tmp_path / "c", events, {**BASE_CONFIG, "MIX_FORGET_LIMIT": 0.2})
    limits, _ = _drift_legend([a, b], tmp_path / "shared")
    assert limits == ["MIX_FORGET_LIMIT +10.0% (a, b)"]
    limits, _ = _drift_legend([a, c, b], tmp_path / "two")
    assert limits == ["MIX_FORGET_LIMIT +10.0% (a, b)", "MIX_FORGET_LIMIT +20.0% (c)"]


def test_a_limit_far_above_the_curves_is_written_not_drawn(runs, tmp_path):
    limits, notes = _drift_legend([runs["finished"], runs["running"]], tmp_path)
    assert limits == ["MIX_FORGET_LIMIT +10.0% (sft-noreplay)"]
    assert notes == ["MIX_FORGET_LIMIT +1000.0% (sft-replay) (above the plot)"]


def test_the_run_report_and_the_sweep_page_share_one_style(runs):
    """One look (tatu.pages): the run report's page carries the shared style and no other
    (tests/sweep/test_report_page.py checks the sweep page the same way)."""
    from tatu.pages.markup import STYLE

    styles = re.findall(r"<style>(.*?)</style>", runs["index"].read_text(encoding="utf-8"), re.S)
    assert styles == [STYLE]


def test_the_drift_plot_draws_the_last_forecast_as_a_band_to_the_last_step(tmp_path):
    """A run stopped by its forecast at step 8 of 40: the drift plot carries the forecast's band from
    step 8 to step 40 (its values the event's), the key says how to read it; a run without one has none."""
    from matplotlib.figure import Figure

    from tatu.evals.forecast import BandPoint, Crossing, Forecast
    from tatu.ops.report import plots

    band = [BandPoint(8, 0.02, 0.015, 0.03), BandPoint(24, 0.07, 0.05, 0.1), BandPoint(40, 0.11, 0.09, 0.16)]
    forecast = Forecast(8, 40, 0.11, 0.09, 0.16, 0.08, Crossing(30, 22, None), band, 3)
    reason = "forecast: drift at step 40 +11.0% [+9.0%,+16.0%] (90%), lower bound > MIX_FORGET_LIMIT 8.0%"
    events = [eval_event(0, 9.0, 31.0, 52.0, 0.0, True), eval_event(4, 8.8, 31.0, 52.5, 0.01, True),
              {**eval_event(8, 8.7, 31.1, 53.0, 0.02, True), "forecast": forecast.to_json()},
              {"event": "abort", "time": 9.0, "step": 8, "reason": reason, "by": "forecast", "forecast": forecast.to_json()}]
    doomed = report.load_run(write_run(tmp_path / "doomed", events, BASE_CONFIG))
    plain = report.load_run(write_run(tmp_path / "plain", events[:2], BASE_CONFIG))
    assert plots.last_forecast(doomed).forecast == forecast and plots.last_forecast(plain) is None
    ax = Figure().add_subplot()
    top = plots._draw_run(ax, 0, doomed, plots.ruler_drift, 100.0, forecast=True)
    (dashed,) = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert list(dashed.get_xdata()) == [8, 24, 40] and list(dashed.get_ydata()) == pytest.approx([2.0, 7.0, 11.0])
    assert top == pytest.approx(16.0)
    drift = {p.name: p for p in report.render_plots([doomed, plain], tmp_path / "plots")}["drift.png"]
    assert "doomed forecast at step 8: drift at step 40 +11.0%, 90% interval (dashed)" in drift.legend
    assert "plain forecast" not in drift.legend
    groups = plots.group_runs([doomed, plain])
    assert "last forecast (docs/forecast.md) runs dashed" in plots.key(groups)
    assert "forecast" not in plots.key(plots.group_runs([plain]))

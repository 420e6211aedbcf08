"""The report leads with the answer: a sentence per run whose numbers are the events' (read here
independently), the learning-vs-forgetting picture drawn from the same evals, both before any
table; legends outside the data on every plot of both pages; absent categories one line."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from page_world import BASE_CONFIG, CRITERIA, change_point, eval_event, report_runs, sweep_data, write_run
from tatu.ops.report.lead import sentence_html
from tatu.ops.report.page import build_report, load_run, render_plots
from tatu.ops.report.picture import picture_axes, render_picture
from tatu.sweep.report.plots import render_plots as sweep_plots

LIMIT = "MIX_FORGET_LIMIT +10.0%"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return report_runs(tmp_path_factory.mktemp("runs"))


def _naive(run_dir: Path) -> tuple[dict[int, dict], dict | None]:
    """The events read again: whole lines only, the later eval of a step winning."""
    evals, verdict = {}, None
    for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event["event"] == "eval":
            evals[event["step"]] = event
        elif event["event"] == "verdict":
            verdict = event
    return evals, verdict


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def _ci(point: dict) -> str:
    return f"{_pct(point['value'])} [{_pct(point['lo'])},{_pct(point['hi'])}]"


def _text(html_text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


def test_each_sentence_names_the_verdict_and_the_number_that_decided_it_with_its_ci(runs):
    evals, verdict = _naive(runs["finished"])
    worst = max((e for s, e in evals.items() if s > 0), key=lambda e: e["drift"]["value"])
    text = _text(sentence_html(load_run(runs["finished"])))
    assert text.startswith("sft-noreplay: judged on the sftHeld change vs step 0 and the English ruler's drift, it forgets")
    assert f"decided by its worst drift, {_ci(worst['drift'])} at step {worst['step']} against {LIMIT}." in text
    assert verdict["ci_covers"]["text"] in text
    evals, _ = _naive(runs["running"])
    last = evals[max(evals)]
    text = _text(sentence_html(load_run(runs["running"])))
    assert text == (f"sft-replay: no verdict yet (still running, or stopped before its end); at its last eval, step "
                    f"{last['step']}: sftHeld {_ci(last['changes']['sftHeld'])}, drift {_ci(last['drift'])}.")


def _judged(tmp_path, outcome: str, aborted=None, sft=-0.2, drift=0.02) -> str:
    events = [eval_event(0, 9.0, 31.0, 52.0, 0.0, True), eval_event(4, 8.5, 31.5, 53.0, drift, True)]
    numbers = {"step": 4, "sftHeld_change": change_point(sft), "drift": change_point(drift), "worst_drift": drift,
               "worst_drift_step": 4, "aborted": aborted}
    events.append({"event": "verdict", "step": 4, "verdict": outcome, "line": "VERDICT", "numbers": numbers, "criteria": CRITERIA})
    run_dir = write_run(tmp_path / outcome, events, BASE_CONFIG)
    return _text(sentence_html(load_run(run_dir)))


def test_holds_flat_inconclusive_and_a_non_finite_abort_name_their_own_number(tmp_path):
    sft, drift = change_point(-0.2), change_point(0.02)
    assert (f"it holds; decided by sftHeld {_ci(sft)} at step 4, below 0 beyond its CI, with drift {_ci(drift)} "
            f"against {LIMIT}.") in _judged(tmp_path, "holds")
    flat = _judged(tmp_path, "flat", sft=0.001, drift=0.001)
    assert f"sftHeld {_ci(change_point(0.001))} and drift {_ci(change_point(0.001))} at step 4, both CIs across 0" in flat
    assert f"sftHeld {_ci(sft)} at step 4, not beyond its CI" in _judged(tmp_path, "inconclusive")
    assert "decided by the run aborted at step 4: non-finite loss." in _judged(tmp_path / "nan", "forgets",
                                                                              aborted="non-finite loss")
    over = _judged(tmp_path / "over", "forgets", aborted="drift +15.0% > MIX_FORGET_LIMIT 10.0%", drift=0.15)
    assert f"decided by its worst drift, {_ci(change_point(0.15))} at step 4 against {LIMIT} (aborted)." in over


def test_the_sentences_and_the_picture_come_before_every_table(runs):
    page = runs["index"].read_text(encoding="utf-8")
    first_table = page.index("<table")
    sentences = [m.start() for m in re.finditer(r'<p class="verdict-sentence"', page)]
    assert len(sentences) == 2 and max(sentences) < page.index("learning_vs_forgetting.png") < first_table
    assert page.index("drift.png") < first_table  # the other plots before the tables too


def _lines(ax) -> dict[str, list[float]]:
    """Each labelled line's points, flattened: x0, y0, x1, y1, ..."""
    return {line.get_label(): [float(v) for xy in zip(line.get_xdata(), line.get_ydata()) for v in xy]
            for line in ax.get_lines()}


def test_the_picture_is_each_runs_sftheld_change_against_its_drift_with_the_limit_and_the_abort(tmp_path, runs):
    reason = "drift +15.0% > MIX_FORGET_LIMIT 10.0%"
    aborted = write_run(tmp_path / "aborted", [
        eval_event(0, 9.0, 31.0, 52.0, 0.0, True), eval_event(4, 8.5, 31.5, 60.0, 0.15, False),
        {"event": "abort", "step": 4, "reason": reason}], BASE_CONFIG)
    fig, ax, notes = picture_axes([load_run(runs["finished"]), load_run(aborted)])
    lines = _lines(ax)
    for name, run_dir in (("sft-noreplay", runs["finished"]), ("aborted", aborted)):
        evals, _ = _naive(run_dir)
        expected = [v * 100 for _, e in sorted(evals.items()) for v in (e["drift"]["value"], e["changes"]["sftHeld"]["value"])]
        assert lines[name] == pytest.approx(expected), name
    marked = [float(v) for line in ax.get_lines() if line.get_marker() == "X" for v in (*line.get_xdata(), *line.get_ydata())]
    evals, _ = _naive(aborted)
    assert marked == pytest.approx([15.0, evals[4]["changes"]["sftHeld"]["value"] * 100])
    assert f"aborted aborted at step 4: {reason}" in lines
    limit = [xy for label, xy in lines.items() if label == f"{LIMIT} (sft-noreplay, aborted)"]
    assert limit and limit[0][0::2] == [10.0, 10.0] and notes == []  # a vertical line at the limit


def _overlap(a, b) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return max(width, 0) * max(height, 0)


def test_no_legend_covers_the_axes_on_either_page(runs, tmp_path):
    records = [load_run(runs["finished"]), load_run(runs["running"])]
    plots = render_plots(records, tmp_path) + [render_picture(records, tmp_path)] + sweep_plots(sweep_data(), tmp_path)
    assert len(plots) == 7
    for plot in plots:
        assert plot.legend_box is not None and plot.legend_box[3] <= plot.axes_box[1], plot.name  # below the axes
        assert _overlap(plot.legend_box, plot.axes_box) == 0, plot.name
        assert 0 <= plot.legend_box[0] and plot.legend_box[2] <= plot.size[0] and plot.legend_box[1] >= 0, plot.name


def test_absent_word_categories_are_one_line_without_the_install_hint(tmp_path):
    note = ("no category metrics: the data dir was built without tags; install the taggers with: apt-get install -y "
            "apertium-por-cat apertium-eng-spa, then rebuild the data dir with `tatu data build`")
    dirs = []
    for name in ("a", "b"):
        events = [eval_event(0, 9.0, 31.0, 52.0, 0.0, True), eval_event(4, 8.5, 31.5, 53.0, 0.01, True)]
        for event in events:
            event.update(categories={}, categories_note=note)
        dirs.append(write_run(tmp_path / name, events, BASE_CONFIG))
    page = build_report(dirs, tmp_path / "out").read_text(encoding="utf-8")
    assert re.findall(r'<p class="absent"[^>]*>(.*?)</p>', page) == [
        "Word categories: none for a, b (the data dir was built without tags; docs/metrics.md says how to get them)."]
    assert "apt-get" not in page and '<table id="categories"' not in page


def test_what_the_verdicts_judge_is_said_once_and_a_run_that_judged_another_set_says_its_own(tmp_path):
    sft, drift = change_point(-0.2), change_point(0.02)
    dirs = []
    for name, judged in (("a", "sftHeld"), ("b", "sftHeld"), ("trunk", "ptVal")):
        numbers = {"step": 4, f"{judged}_change": sft, "drift": drift, "worst_drift": 0.02, "worst_drift_step": 4,
                   "aborted": None}
        events = [eval_event(0, 9.0, 31.0, 52.0, 0.0, True), eval_event(4, 8.5, 31.5, 53.0, 0.02, True),
                  {"event": "verdict", "step": 4, "verdict": "holds", "line": "VERDICT", "numbers": numbers,
                   "criteria": CRITERIA}]
        dirs.append(write_run(tmp_path / name, events, BASE_CONFIG if judged == "sftHeld" else {"TATU_MODE": "trunk"}))
    page = build_report(dirs, tmp_path / "out").read_text(encoding="utf-8")
    lead = _text(page[page.index('<section id="lead">'):page.index("</section>")])
    assert lead.count("judged on the sftHeld change vs step 0 and the English ruler's drift") == 1
    assert "; trunk: as its sentence says." in lead
    for name in ("a", "b"):
        assert f"{name}: holds; sftHeld {_ci(sft)} and drift {_ci(drift)} at step 4." in lead
    assert (f"trunk: judged on the ptVal change vs step 0 and the English ruler's drift, it holds; decided by ptVal "
            f"{_ci(sft)} at step 4, below 0 beyond its CI") in lead

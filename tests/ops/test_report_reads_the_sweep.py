"""One computation per number (issue 43 item 5): a configuration's sentence in the run report shows
the CI its sweep's report.json holds for that configuration at that step (the sweep page's), not a
second resampling of the same lines; without a report.json it computes its own, as before; one it cannot
read is refused (65), never replaced by its own."""
from __future__ import annotations

import html
import math
import re
from dataclasses import replace

import pytest

from page_world import SWEEP_NAME, seed_member_runs, sweep_data, stats
from run_records import sweep_report
from tatu.exitcodes import BAD_DATA, TatuExit
from tatu.ops.report.page import build_report
from tatu.sweep.judge.sweep_report import write_report_json


def _sentence(index, config: str) -> str:
    page = index.read_text(encoding="utf-8")
    found = re.search(rf'<p class="verdict-sentence" data-config="{config}">(.*?)</p>', page, re.S).group(1)
    return html.unescape(re.sub(r"<[^>]+>", "", found))


def test_the_run_reports_configuration_sentence_reads_the_sweeps_ci(tmp_path):
    runs = seed_member_runs(tmp_path)
    own = _sentence(build_report(runs, tmp_path / "own"), "replay-n0")
    # the sweep's numbers for replay-n0, all three seeds at the run report's step (4: two aborted there)
    base, replay = sweep_data().compare.configs
    drift, sft = stats({"1": 0.031, "2": 0.034, "3": 0.037}), stats({"1": -0.05, "2": -0.07, "3": -0.06})
    base = replace(base, stats={"drift": drift, "sftHeld": sft}, end_steps=(4, 8), common_step=4, common_tokens=None,
                   stats_common={"drift": drift, "sftHeld": sft})
    (tmp_path / "sweeps" / SWEEP_NAME / "report").mkdir()
    write_report_json(tmp_path / "sweeps" / SWEEP_NAME / "report",
                      sweep_report(sweep_data().verdict, [base, replay]))
    read = _sentence(build_report(runs, tmp_path / "read"), "replay-n0")
    assert f"drift {drift.change.text()} and sftHeld {sft.change.text()} over seeds x lines at step 4" in read
    assert read != own and math.isfinite(drift.change.lo)
    # a report whose configuration ended elsewhere and has another common step is not this number: its own stands
    moved = replace(base, end_steps=(8,), common_step=8, stats_common=None)
    write_report_json(tmp_path / "sweeps" / SWEEP_NAME / "report", sweep_report(sweep_data().verdict, [moved, replay]))
    assert _sentence(build_report(runs, tmp_path / "again"), "replay-n0") == own


def test_a_sweep_report_the_run_report_cannot_read_is_refused_not_replaced_by_its_own_ci(tmp_path):
    """Where report.json is there but unreadable (torn by hand, or another tatu's), the number it holds
    is not recomputed here (it once was, silently: a second CI beside the sweep page's): exit 65 naming it."""
    runs = seed_member_runs(tmp_path)
    report = tmp_path / "sweeps" / SWEEP_NAME / "report"
    report.mkdir()
    (report / "report.json").write_text('{"compare": {"configs": [')
    with pytest.raises(TatuExit) as err:
        build_report(runs, tmp_path / "out")
    assert err.value.code == BAD_DATA and str(err.value).startswith(f"{report / 'report.json'}: unreadable sweep report")


def test_a_label_the_sweeps_report_lacks_at_that_step_gets_no_ci_of_the_run_reports_own(tmp_path):
    runs = seed_member_runs(tmp_path)
    base, replay = sweep_data().compare.configs
    drift = stats({"1": 0.031, "2": 0.034, "3": 0.037})
    base = replace(base, stats={"drift": drift}, end_steps=(4, 8), common_step=4, common_tokens=None,
                   stats_common={"drift": drift})
    (tmp_path / "sweeps" / SWEEP_NAME / "report").mkdir()
    write_report_json(tmp_path / "sweeps" / SWEEP_NAME / "report", sweep_report(sweep_data().verdict, [base, replay]))
    read = _sentence(build_report(runs, tmp_path / "read"), "replay-n0")
    assert f"drift {drift.change.text()} over seeds x lines at step 4" in read and "sftHeld" not in read

"""One computation per number (issue 43 item 5), on the tiny demo (`tiny_demo`, shared, built once):
every quantity the sweep page, the run report and the closing output share with report.json shows
report.json's CI, to the digit: each configuration's drift and sftHeld change over seeds (at the
ends and at the common step), each paired difference at the common step, and the run report's
sentence per configuration (its CI at the last eval every seed reached)."""
from __future__ import annotations

import html
import re

import pytest

from tatu.ops.demo import SWEEP
from tatu.sweep.judge.sweep_report import read_report_json


def _rows(page: str, table_id: str) -> list[list[str]]:
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S)
    assert table, table_id
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
            for r in rows if "<td" in r]


@pytest.mark.slow
def test_every_shared_quantity_shows_report_jsons_ci(tiny_demo):
    sweep_dir = tiny_demo.out / "sweeps" / SWEEP
    report = read_report_json(sweep_dir / "report" / "report.json")
    configs = {c.key: c for c in report.compare.configs}
    page = (sweep_dir / "report" / "index.html").read_text(encoding="utf-8")
    checked = 0
    for table_id, at in (("configs", "stats"), ("configs-common", "stats_common")):
        for row in _rows(page, table_id):
            stats = getattr(configs[row[0].removesuffix(" *")], at)
            assert row[3] == stats["drift"].change.text() and row[7] == stats["sftHeld"].change.text(), (table_id, row)
            checked += 2
    for row in _rows(page, "paired-like"):
        paired = configs[row[0]].paired_common
        assert row[3] == paired["drift"].change.relative().text(), row
        assert row[6] == paired["sftHeld"].change.relative().text(), row
        checked += 2
    # the run report's sentence per configuration: the same CI as report.json's at its step
    run_page = html.unescape(re.sub(r"<[^>]+>", "", (tiny_demo.out / "report" / "index.html").read_text(encoding="utf-8")))
    for key, config in configs.items():
        found = re.search(rf"{re.escape(key)} \(seeds [0-9, ]+\): [^;]*; drift (\S+ \S+) and sftHeld (\S+ \S+) over seeds x "
                          r"lines at step (\d+)", run_page)
        assert found, key
        step = int(found.group(3))
        stats = config.stats if config.end_steps == (step,) else config.stats_common
        assert step in (*config.end_steps, config.common_step)
        assert (found.group(1), found.group(2)) == (stats["drift"].change.text(), stats["sftHeld"].change.text()), key
        checked += 2
    # the closing output's table per configuration: report.json's
    for key, config in configs.items():
        row = next(line for line in tiny_demo.stdout.splitlines() if re.match(rf"{re.escape(key)}( \*)?\s+\d+/\d+\s", line))
        assert config.stats["drift"].change.text() in row and config.stats["sftHeld"].change.text() in row
        checked += 2
    assert checked >= 4 * len(configs) + 2

"""`tatu sweep report NAME`: the closing table in the terminal, report.json, PNG plots, one HTML page.

The numbers are sweep/judge/analysis.py's (report.json: sweep/judge/sweep_report.py's one writer and reader), the
text sweep/report/tables.py's, the page sweep/report/page.py's and the plots sweep/report/plots.py's, in the run
report's look (tatu.pages).
"""
from __future__ import annotations

from pathlib import Path

from tatu.daemon.run.paths import SweepDir
from tatu.sweep.judge.analysis import analyze
from tatu.sweep.report.page import write_page
from tatu.sweep.report.plots import render_plots
from tatu.sweep.judge.sweep_report import SweepReport, write_report_json
from tatu.sweep.report.tables import closing_text


def write_report(sweep_dir: Path, out_dir: Path | None = None) -> tuple[SweepReport, str, Path]:
    data = analyze(sweep_dir)
    out_dir = Path(out_dir or SweepDir(sweep_dir).report)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_report_json(out_dir, data)
    text = closing_text(data)
    return data, text, write_page(data, text, render_plots(data, out_dir), out_dir)

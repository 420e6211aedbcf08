"""The sequential verdict's measured false pass (sweep/judge/verdict.py) is read from where it is
measured: bench/sequential.py's own at_threshold lines in sweep/judge/measured_false_pass.txt, the
lines docs/sweeps.md prints with their commands, and `bench/sequential.py --record` rewrites."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from tatu.evals.seeds.sequential import Design
from tatu.evals.seeds.simulate import Summary
from tatu.sweep.judge import verdict
from tatu.sweep.judge.schedule import Schedule

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_sequential", ROOT / "bench" / "sequential.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


def test_the_verdict_quotes_the_lines_the_docs_print():
    docs = (ROOT / "docs" / "sweeps.md").read_text().splitlines()
    recorded = _lines(verdict.MEASURED)
    assert len(recorded) == 4 and all(line in docs for line in recorded), recorded
    rates = verdict.measured_rates(verdict.MEASURED)
    # each design's number as the line says it (the sentence shows it to 0.1%)
    assert rates == {("obf", False): 0.024, ("pocock", False): 0.016, ("obf", True): 0.026, ("pocock", True): 0.022}


def _decided(design: Design) -> Schedule:
    return Schedule(design, (), (), frozenset(), True, "")


def test_the_sentence_follows_the_file_and_says_so_when_nothing_was_measured(tmp_path, monkeypatch):
    before = verdict.verdict_clause(_decided(Design("obf", 3, 5)), "b", "first config such that drift_hi < 5%", "config")
    assert ("(2.4% measured at few seeds: nice -n 10 .venv/bin/python bench/sequential.py --scenario at_threshold "
            "--reps 2000 --record; docs/sweeps.md)") in before
    measured = tmp_path / "measured.txt"
    measured.write_text(verdict.MEASURED.read_text().replace("false_pass=0.024", "false_pass=0.052"))
    monkeypatch.setattr(verdict, "MEASURED", measured)
    after = verdict.verdict_clause(_decided(Design("obf", 3, 5)), "b", "first config such that drift_hi < 5%", "config")
    assert after == before.replace("2.4% measured", "5.2% measured")
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing measured yet\n")
    monkeypatch.setattr(verdict, "MEASURED", empty)
    assert math.isnan(verdict.measured_false_pass("obf", False))


def test_the_bench_records_its_own_lines_where_the_verdict_reads_them(tmp_path):
    bench = _bench()
    measured = tmp_path / "measured.txt"
    measured.write_text(verdict.MEASURED.read_text())
    shown = bench.line("sequential pocock pooled", "at_threshold", Summary(300, 0.0412, 0.011, math.nan, 0.9))
    bench.record([shown], measured)
    rates = verdict.measured_rates(measured)
    assert rates[("pocock", True)] == 0.041 and rates[("obf", True)] == 0.026  # the other designs' lines kept
    # in place of the old line, beside its command's comment, and nothing else moved
    before, after = verdict.MEASURED.read_text().splitlines(), measured.read_text().splitlines()
    assert [a for a, b in zip(before, after) if a != b] == [l for l in before if l.startswith("sequential pocock pooled")]
    assert len(before) == len(after)

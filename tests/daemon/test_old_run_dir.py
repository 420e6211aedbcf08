"""A run directory written before records had versions still reads, through the one reader of each
file (daemon/run/records.py), and a version newer than this tatu is refused naming the file.

The fixture (tests/fixtures/run-v1/README.md) is a real member's run dir written by an older tatu."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tatu.daemon.run.paths import RunDir
from tatu.daemon.run.records import EVAL_FORMAT, VERDICT_FORMAT
from tatu.daemon.run.state import RunState
from tatu.ops import cli
from tatu.records import FORMAT_KEY

OLD = Path(__file__).resolve().parent.parent / "fixtures" / "run-v1"


def without_version(payload: dict) -> dict:
    return {k: v for k, v in payload.items() if k != FORMAT_KEY}


def test_every_eval_event_of_an_old_run_reads_and_writes_back_its_keys_in_order():
    run = RunDir(OLD)
    events = run.events("eval")
    records = run.eval_records()
    assert [r.step for r in records] == [0, 2, 4] and len(events) == 3
    for event, record in zip(events, records):
        old = {k: v for k, v in event.items() if k not in ("event", "time")}
        new = record.to_json()
        assert new[FORMAT_KEY] == EVAL_FORMAT and FORMAT_KEY not in old
        assert list(without_version(new)) == list(old)  # the same keys, in the same order
        assert without_version(new) == old
    assert records[-1].drift.value == events[-1]["drift"]["value"]


def test_an_old_verdict_and_resume_state_read():
    verdict = RunDir(OLD).verdict()
    old = json.loads((OLD / "verdict.json").read_text())
    assert verdict.outcome == old["verdict"] and verdict.numbers.set_name == "sftHeld"
    assert without_version(verdict.to_json()) == old and verdict.to_json()[FORMAT_KEY] == VERDICT_FORMAT
    payload = json.loads((OLD / "state" / "resume.json").read_text())
    state = RunState.from_json(payload, n_resamples=200, seed=1)
    assert [r.step for r in state.history] == [0, 2, 4] and state.best.set_name == "sftHeld"
    assert [without_version(r) for r in state.to_json()["history"]] == payload["history"]


def test_the_run_report_reads_an_old_run(tmp_path):
    run = tmp_path / "old-run"
    shutil.copytree(OLD, run)
    assert cli.main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert "holds" in page and "-13.1%" in page  # the old verdict and its final drift, as the run wrote them


def test_a_newer_format_is_refused_naming_the_file(tmp_path):
    run = tmp_path / "future"
    shutil.copytree(OLD, run)
    verdict_file = run / "verdict.json"
    verdict_file.write_text(json.dumps({**json.loads(verdict_file.read_text()), FORMAT_KEY: VERDICT_FORMAT + 1}))
    with pytest.raises(ValueError, match=f"{verdict_file}: {FORMAT_KEY} {VERDICT_FORMAT + 1} is not one this tatu reads"):
        RunDir(run).verdict()
    lines = (run / "events.jsonl").read_text().splitlines()
    future = [json.dumps({**json.loads(line), FORMAT_KEY: EVAL_FORMAT + 1}) if '"event": "eval"' in line else line
              for line in lines]
    (run / "events.jsonl").write_text("\n".join(future) + "\n")
    with pytest.raises(ValueError, match=r"events.jsonl: eval event #1: format_version 3"):
        RunDir(run).eval_records()


def test_the_runs_one_view_reads_an_old_run():
    """read_run (daemon/run/view.py) on a run dir from before abort events carried an exit code."""
    from tatu.daemon.run.view import read_run

    view = read_run(OLD)
    assert [r.step for r in view.evals] == [0, 2, 4] and view.verdict.outcome == "holds"
    assert (view.state, view.code, view.ends) == ("finished", 0, ())

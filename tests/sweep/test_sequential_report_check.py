"""`tatu sweep report` on a sequential sweep recomputes every look from the run dirs and compares
them with the looks log (sweep/judge/looks_check.py): a corrupted decision, a look logged twice, a
look the files do not allow, or one never logged refuses the report with 65 and one line naming
the file and the look. Members are tests/sequential_world.py's (simulated per-line scores); the
report runs `tatu sweep report` in-process with sweep/judge/analysis.member_result answering from them."""
from __future__ import annotations

import io
import json

import pytest

from run_records import config_result
from sequential_world import coordinator, scored, write_sweep

from tatu.exitcodes import BAD_DATA
from tatu.ops.cli import main as tatu_main
from tatu.sweep.judge import analysis
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.lock import read_lock
from tatu.sweep.judge import looks_log
from tatu.sweep.judge.looks_check import check_looks

RULE = "first config such that drift_hi < 5%"
CONFIGS = "d = { REPLAY_N = 1 }\na = { REPLAY_N = 0 }\nb = { REPLAY_N = 2 }\nc = { REPLAY_N = 4 }\n"


@pytest.fixture
def finished(tmp_path, monkeypatch):
    """A sequential sweep run to its verdict: (its sweep dir, its lock, the stage table the report builds)."""
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "rt"))
    sweep_dir = write_sweep(tmp_path, "rep", RULE, configs=CONFIGS)
    assert coordinator(sweep_dir, out=io.StringIO()).run() == 0
    monkeypatch.setattr(analysis, "member_result", scored)
    lock = read_lock(sweep_dir)
    table = [config_result(key, {"config": key}, [scored(m) for m in lock.members_of("compare") if m.config_key == key],
                           None, effective=next(e.config for e in lock.members if e.member.config_key == key))
             for key in ("d", "a", "b", "c")]
    return sweep_dir, lock, table


def rewrite(sweep_dir, change) -> None:
    path = sweep_dir / looks_log.FILE
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(doc) + "\n" for doc in change(lines)))


def test_an_untouched_log_agrees_with_the_run_dirs(finished, capsys):
    sweep_dir, lock, table = finished
    logged = check_looks(lock, sweep_dir, table)
    assert [(l.config, l.look.n_seeds, l.look.decision) for l in logged][-2:] == [("a", 3, "fail"), ("b", 3, "pass")]
    # the whole report: c's members never ran, and the verdict is complete without them
    assert tatu_main(["sweep", "report", "rep", "--sweeps", str(sweep_dir.parent)]) == 0
    report = json.loads((sweep_dir / "report" / "report.json").read_text())
    assert report["verdict"]["complete"] and report["verdict"]["chosen"] == "b"
    text = capsys.readouterr().out
    assert "PROVISIONAL" not in text
    # the verdict is the looks': with its guarantee and the runs spent
    assert ("VERDICT (locked rule): config=b (first config such that drift_hi < 5%); sequential obf, 3 to 5 seeds: a "
            "configuration at its threshold passes a criterion with probability 2.5% by design") in text
    assert "; runs: 11 of the fixed design's 20 (5 seeds x 4 configurations, 55%)" in text
    # under it, each configuration's looks, in the text and on the page; no "more seeds would" advice
    assert "    d: fail, 5 of 5 seeds run\n      look d drift_hi < 5% at 3 seeds: continue (CI at the spent level" in text
    assert "what would change it" not in text
    # the checks under it are the looks' decisions, not the fixed design's 95% CI over the seeds run
    assert "  config=a fails drift_hi < 5% (fail at 3 seeds, CI at the spent level up to +21.4%)" in text
    assert "  config=c is not judged: no value for its looks (not run: the rule was decided before it)" in text
    assert [c["config"] for c in report["verdict"]["checks"] if not c["failed"] and not c["missing"]] == ["b"]
    page = (sweep_dir / "report" / "index.html").read_text()
    assert "c: not run, 0 of 5 seeds run" in page and "look b drift_hi &lt; 5% at 3 seeds: pass" in page


def test_a_corrupted_decision_refuses_the_report_naming_the_file_and_the_look(finished, capsys):
    sweep_dir, lock, table = finished

    def corrupt(lines):
        lines[3]["look"]["decision"] = "pass"  # a's fail at 3 seeds, turned into a pass
        return lines

    rewrite(sweep_dir, corrupt)
    with pytest.raises(SweepError) as err:
        check_looks(lock, sweep_dir, table)
    assert err.value.code == BAD_DATA
    assert str(err.value).startswith(f"{sweep_dir / looks_log.FILE}:4: a drift_hi < 5% at 3 seeds disagrees with the "
                                     "run dirs: decision 'pass' (recomputed 'fail')")
    # the command: exit 65, that one line
    code = tatu_main(["sweep", "report", "rep", "--sweeps", str(sweep_dir.parent)])
    assert code == BAD_DATA
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith(f"tatu sweep: {sweep_dir / looks_log.FILE}:4: a drift_hi")


@pytest.mark.parametrize("change,says", [
    (lambda lines: lines + [lines[-1]], ":6: b drift_hi < 5% at 3 seeds is logged twice (first at line 5)"),
    (lambda lines: lines[:-1], ": b drift_hi < 5% at 3 seeds (pass): the run dirs allow it but it was never logged"),
    (lambda lines: lines[:1] + [{**lines[1], "config": "c"}] + lines[2:], ":2: c drift_hi < 5% at 4 seeds: logged, but the "
                                                                         "run dirs allow no such look"),
])
def test_a_log_the_files_do_not_give_is_refused(finished, change, says):
    sweep_dir, lock, table = finished
    rewrite(sweep_dir, change)
    with pytest.raises(SweepError) as err:
        check_looks(lock, sweep_dir, table)
    assert err.value.code == BAD_DATA and says in str(err.value), str(err.value)

"""A sequential sweep scheduled from its looks (sweep/judge/schedule.py) through the coordinator
every backend runs (sweep/run/coordinator.py), on tests/sequential_world.py's instant members with
simulated per-line scores: which members run, in which order, and that each look is in the looks
log before anything is started from it."""
from __future__ import annotations

import io
import json
import re
import shutil
from dataclasses import replace

import pytest

from sequential_world import coordinator, ran, simulated_result, write_sweep

from tatu.exitcodes import BAD_DATA
from tatu.ops.cli import main as tatu_main
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.lock import read_lock
from tatu.sweep.judge import looks_log
from tatu.sweep.judge.schedule import schedule
from tatu.sweep.judge.verdict import sequential_choice

# d sits near the 5% limit (its looks continue), a is far over it, b and c far under it
FIRST_CONFIG = ("first config such that drift_hi < 5%",
                "d = { REPLAY_N = 1 }\na = { REPLAY_N = 0 }\nb = { REPLAY_N = 2 }\nc = { REPLAY_N = 4 }\n")


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "rt"))
    return tmp_path


def run(sweep_dir, k: int = 3) -> str:
    out = io.StringIO()
    assert coordinator(sweep_dir, k, out).run() == 0, out.getvalue()
    return out.getvalue()


def test_first_config_runs_configurations_in_order_and_stops_at_the_first_pass(runtime):
    sweep_dir = write_sweep(runtime, "fc", *FIRST_CONFIG)
    said = run(sweep_dir)
    looks = looks_log.read(sweep_dir)
    assert [(l.config, l.look.n_seeds, l.look.decision) for l in looks] == [
        ("d", 3, "continue"), ("d", 4, "continue"), ("d", 5, "fail"), ("a", 3, "fail"), ("b", 3, "pass")]
    # d got its seeds one at a time after the first look; c, after the chosen b, never ran
    assert ran(sweep_dir) == ["a-s1", "a-s2", "a-s3", "b-s1", "b-s2", "b-s3", "d-s1", "d-s2", "d-s3", "d-s4", "d-s5"]
    lines = said.splitlines()
    # each look is logged (and said) before the member it allows is started
    assert lines.index(next(l for l in lines if l.startswith("look d drift_hi < 5% at 3 seeds"))) < lines.index("started d-s4")
    assert lines.index(next(l for l in lines if l.startswith("look d drift_hi < 5% at 5 seeds"))) < lines.index("started a-s1")
    assert lines.index(next(l for l in lines if l.startswith("look a "))) < lines.index("started b-s1")
    assert "runs: 11 of the fixed design's 20 (5 seeds x 4 configurations, 55%)" in said
    assert "verdict: config=b (first config such that drift_hi < 5%); sequential obf, 3 to 5 seeds" in said


def test_an_ordered_axis_is_a_fixed_sequence_and_doses_past_the_first_failure_do_not_run(runtime):
    # smallest REPLAY_N: tested from 4 down; 4 passes, 2 fails, so 1 and 0 never run and 4 is chosen
    sweep_dir = write_sweep(runtime, "ax", "smallest REPLAY_N such that drift_hi < 5%", replay=(0, 1, 2, 4))
    said = run(sweep_dir)
    assert {m.split("-s")[0] for m in ran(sweep_dir)} == {"replay-n4", "replay-n2"}
    decisions = {l.config: l.look.decision for l in looks_log.read(sweep_dir)}
    assert decisions == {"replay-n4": "pass", "replay-n2": "fail"}
    assert "verdict: REPLAY_N=4 " in said
    assert "runs: 7 of the fixed design's 20" in said


def test_a_finished_sweep_started_again_logs_nothing_twice(runtime):
    sweep_dir = write_sweep(runtime, "again", *FIRST_CONFIG)
    run(sweep_dir)
    before = (sweep_dir / looks_log.FILE).read_text()
    started = ran(sweep_dir)
    run(sweep_dir)
    assert (sweep_dir / looks_log.FILE).read_text() == before
    assert ran(sweep_dir) == started


def test_the_log_alone_gives_the_schedule_and_a_contradicted_look_is_refused(runtime):
    sweep_dir = write_sweep(runtime, "alone", *FIRST_CONFIG)
    run(sweep_dir)
    lock = read_lock(sweep_dir)
    states = {p.parent.name: "done" for p in (sweep_dir / "runs").glob("*/verdict.json")}
    from_log = schedule(lock, states, looks_log.read(sweep_dir), None)  # what `tatu sweep status` reads
    assert from_log.decided and sequential_choice(lock.plan, from_log) == "b" and not from_log.to_log
    assert [c.decision for c in from_log.configs] == ["fail", "fail", "pass", "waiting"]
    # d's look at 4 seeds (line 2) with another statistic, its look at 5 not logged yet: recomputing d
    # to log it finds the logged one contradicted, and refuses (65, the file's line) rather than act on it
    entries = looks_log.read(sweep_dir)
    forged = replace(entries[1], look=replace(entries[1].look, statistic=entries[1].look.statistic + 1.0))
    with pytest.raises(SweepError) as err:
        schedule(lock, states, [entries[0], forged], simulated_result, sweep_dir / looks_log.FILE)
    assert err.value.code == BAD_DATA
    assert str(err.value).startswith(f"{sweep_dir / looks_log.FILE}:2: d drift_hi < 5% at 4 seeds disagrees with the "
                                     "run dirs: statistic ")


def status_of(sweep_dir, capsys) -> list[str]:
    (sweep_dir / "coordinator.json").write_text(json.dumps({"backend": "foreground", "k": 3}))
    capsys.readouterr()
    assert tatu_main(["sweep", "status", sweep_dir.name, "--sweeps", str(sweep_dir.parent)]) == 0
    return capsys.readouterr().out.splitlines()


def test_status_shows_the_looks_the_runs_spent_and_the_verdict(runtime, capsys):
    sweep_dir = write_sweep(runtime, "st", *FIRST_CONFIG)
    run(sweep_dir)
    lines = status_of(sweep_dir, capsys)
    assert lines[0].startswith("sweep st (foreground, K=3): 11/11 done")  # c's members were never needed
    assert not any(line.strip().startswith("c-s") for line in lines)
    at = lines.index("  d: fail, 5 of 5 seeds run")
    # the look's mean and CI as every CI is written (tatu.formats.fmt_ci: "+3.2% [-7.6%,+15.3%]")
    assert re.match(r"    look d drift_hi < 5% at 3 seeds: continue \(CI at the spent level [-+][0-9.]+% "
                    r"\[[-+][0-9.]+%,[-+][0-9.]+%\] vs \+5\.0%; t ", lines[at + 1]), lines[at + 1]
    assert lines[at + 3].endswith(", final look)") and " at 5 seeds: fail " in lines[at + 3]
    assert "  c: not run, 0 of 5 seeds run" in lines
    assert "runs: 11 of the fixed design's 20 (5 seeds x 4 configurations, 55%)" in lines
    assert lines[-1].startswith("verdict: config=b (first config such that drift_hi < 5%); sequential obf, 3 to 5 seeds: "
                                "a configuration at its threshold passes a criterion with probability 2.5% by design")


def test_status_mid_sweep_says_what_is_under_test(runtime, capsys):
    # the files as they were when d's look at 3 seeds said continue: d's first 3 seeds, one look
    sweep_dir = write_sweep(runtime, "mid", *FIRST_CONFIG)
    run(sweep_dir)
    for run_dir in (sweep_dir / "runs").iterdir():
        if run_dir.name.split(".", 1)[1] not in ("d-s1", "d-s2", "d-s3"):
            shutil.rmtree(run_dir)
    log = sweep_dir / looks_log.FILE
    log.write_text(log.read_text().splitlines(keepends=True)[0])
    lines = status_of(sweep_dir, capsys)
    assert lines[0].startswith("sweep mid (foreground, K=3): 3/4 done")  # d-s4 is the one the look allows next
    assert "  d: continue, 3 of 5 seeds run, under test" in lines
    assert "runs: 3 of the fixed design's 20 (5 seeds x 4 configurations, 15%)" in lines
    assert lines[-1].startswith("verdict not decided yet: d (3 seeds looked) under test; sequential obf")


def test_a_coordinator_started_on_a_contradicted_log_stops_with_65_and_starts_nothing(runtime):
    sweep_dir = write_sweep(runtime, "bad", *FIRST_CONFIG)
    run(sweep_dir)
    # back to when d-s5 had just finished: d's looks at 3 and 4 logged, a and b not started;
    # the look at 4 seeds then edited (its boundary), as a hand or a bug might
    for run_dir in (sweep_dir / "runs").iterdir():
        if not run_dir.name.split(".", 1)[1].startswith("d-"):
            shutil.rmtree(run_dir)
    path = sweep_dir / looks_log.FILE
    lines = path.read_text().splitlines()[:2]
    doc = json.loads(lines[1])
    doc["look"]["z_bound"] = 2.0
    path.write_text(lines[0] + "\n" + json.dumps(doc) + "\n")
    with pytest.raises(SweepError) as err:
        run(sweep_dir)
    assert err.value.code == BAD_DATA
    assert str(err.value).startswith(f"{path}:2: d drift_hi < 5% at 4 seeds disagrees with the run dirs: z_bound 2.0")
    assert ran(sweep_dir) == ["d-s1", "d-s2", "d-s3", "d-s4", "d-s5"]  # nothing started from it
    assert len(path.read_text().splitlines()) == 2  # nor logged


def test_looks_that_pass_with_an_end_criterion_failing_are_a_fail(runtime, capsys):
    # e's end drift passes its looks at 3 seeds, but an eval during training drifted +30%:
    # every_eval_drift_hi fails over those 3 members, so `first config` goes on to b
    sweep_dir = write_sweep(runtime, "end", "first config such that drift_hi < 5% and every_eval_drift_hi < 10%",
                            configs="e = { REPLAY_N = 1 }\nb = { REPLAY_N = 2 }\n")
    said = run(sweep_dir)
    assert [(l.config, l.look.n_seeds, l.look.decision) for l in looks_log.read(sweep_dir)] == [
        ("e", 3, "pass"), ("b", 3, "pass")]
    assert ran(sweep_dir) == ["b-s1", "b-s2", "b-s3", "e-s1", "e-s2", "e-s3"]
    assert "verdict: config=b " in said
    lines = status_of(sweep_dir, capsys)
    assert "  e: fail, 3 of 5 seeds run (its looks passed; every_eval_drift_hi < 10% fails (+31.0%))" in lines

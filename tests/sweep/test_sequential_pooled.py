"""A min_seeds = 2 sequential sweep (the seed variance pooled across configurations) through the
coordinator every backend runs, on tests/sequential_world.py's instant members (no training): each
look logs the other configurations' members it pooled, a restarted coordinator recomputes a lost
look on the same pool, `tatu sweep report` recomputes every look on the logged pools and agrees, and
a corrupted pooled-member entry refuses the report with 65."""
from __future__ import annotations

import io
import json

import pytest

from run_records import config_result
from sequential_world import coordinator, ran, scored, write_sweep

from tatu.evals.seeds.sequential import Design
from tatu.exitcodes import BAD_DATA
from tatu.ops.cli import main as tatu_main
from tatu.sweep.judge import analysis
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.lock import read_lock
from tatu.sweep.judge import looks_log
from tatu.sweep.judge.looks_check import check_looks
from tatu.sweep.judge.looks_log import PooledGroup
from tatu.sweep.judge.verdict import measured_false_pass
from tatu.sweep.report.status import plan_line

RULE = "first config such that drift_hi < 5%"
# d near the 5% limit (its looks continue), a far over it, b and c far under it
CONFIGS = "d = { REPLAY_N = 1 }\na = { REPLAY_N = 0 }\nb = { REPLAY_N = 2 }\nc = { REPLAY_N = 4 }\n"


@pytest.fixture
def finished(tmp_path, monkeypatch):
    """A pooled sequential sweep run to its verdict: (its sweep dir, its lock, the report's stage table,
    what the coordinator said)."""
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "rt"))
    sweep_dir = write_sweep(tmp_path, "pool", RULE, configs=CONFIGS, min_seeds=2)
    out = io.StringIO()
    assert coordinator(sweep_dir, out=out).run() == 0, out.getvalue()
    monkeypatch.setattr(analysis, "member_result", scored)
    lock = read_lock(sweep_dir)
    table = [config_result(key, {"config": key}, [scored(m) for m in lock.members_of("compare") if m.config_key == key],
                           None, effective=next(e.config for e in lock.members if e.member.config_key == key))
             for key in ("d", "a", "b", "c")]
    return sweep_dir, lock, table, out.getvalue()


def pooled_members(entry) -> dict[str, tuple[str, ...]]:
    return {g.config: g.members for g in entry.pooled}


def test_each_look_logs_the_members_it_pooled(finished):
    sweep_dir, lock, _, said = finished
    assert lock.plan.design == Design("obf", 2, 5)
    looks = looks_log.read(sweep_dir)
    decided = [(l.config, l.look.n_seeds, l.look.decision) for l in looks]
    assert decided == [("d", 2, "continue"), ("d", 3, "continue"), ("d", 4, "continue"), ("d", 5, "fail"),
                       ("a", 2, "fail"), ("b", 2, "pass")]  # a, far over: the fixed design's CI fails it at once
    # d ran first: nothing else had finished, so its looks pooled nothing (1 df at 2 seeds)
    assert all(l.pooled == () for l in looks if l.config == "d")
    assert looks[0].look.n_seeds == 2 and looks[0].look.df < 1.5
    # a's looks: d's first n seeds beside its own n; b's: d's and a's first 2 (at most the look's own count)
    a_at_2, b_look = looks[-2:]
    assert pooled_members(a_at_2) == {"d": ("pool.d-s1", "pool.d-s2")}
    assert pooled_members(b_look) == {"d": ("pool.d-s1", "pool.d-s2"), "a": ("pool.a-s1", "pool.a-s2")}
    assert b_look.pooled[0] == PooledGroup("d", ("pool.d-s1", "pool.d-s2"), (8, 8))
    assert b_look.look.df > 2.5  # 3 pooled df for the seed part, not b's own 1
    assert "pooled" in json.loads((sweep_dir / looks_log.FILE).read_text().splitlines()[-1])
    assert ", seed variance pooled over 3 configurations (3 df))" in said
    assert "runs: 9 of the fixed design's 20 (5 seeds x 4 configurations, 45%)" in said
    # the pooled obf design's rate as bench/sequential.py recorded it (sweep/judge/measured_false_pass.txt)
    assert ("a configuration at its threshold passes a criterion with probability 2.5% by design "
            f"({measured_false_pass('obf', True):.1%} measured at few seeds: nice -n 10 .venv/bin/python bench/sequential.py "
            "--min-seeds 2 --scenario at_threshold --reps 2000 --record; docs/sweeps.md)" in said
            and "its looks' seed variance pooled across up to 3 configurations, which assumes every configuration "
                "has the same seed variance" in said)


def test_the_plan_line_says_the_variance_is_pooled_and_what_that_assumes():
    line = plan_line(Design("obf", 2, 5), 4)
    assert line.endswith(". Each look's seed variance is pooled across up to 4 configurations (its own seeds and each "
                         "other configuration's first finished ones, as many at most), which assumes every configuration "
                         "has the same seed variance")
    assert "pooled" not in plan_line(Design("obf", 3, 5), 4)


def test_a_look_lost_to_a_kill_is_recomputed_on_the_same_pool(finished):
    """Killed after b's first seeds finished and before its look was logged: started again, the
    coordinator logs the same look (the same pooled members, numbers and decision)."""
    sweep_dir, _, _, _ = finished
    path = sweep_dir / looks_log.FILE
    before = path.read_text()
    path.write_text("".join(before.splitlines(keepends=True)[:-1]))
    started = ran(sweep_dir)
    assert coordinator(sweep_dir, out=io.StringIO()).run() == 0
    assert path.read_text() == before
    assert ran(sweep_dir) == started
    assert coordinator(sweep_dir, out=io.StringIO()).run() == 0  # and once more: nothing logged twice
    assert path.read_text() == before


def test_the_report_recomputes_the_pooled_looks_and_agrees(finished, capsys):
    sweep_dir, lock, table, _ = finished
    logged = check_looks(lock, sweep_dir, table)
    assert logged == looks_log.read(sweep_dir)
    assert tatu_main(["sweep", "report", "pool", "--sweeps", str(sweep_dir.parent)]) == 0
    text = capsys.readouterr().out
    assert "VERDICT (locked rule): config=b (first config such that drift_hi < 5%); sequential obf, 2 to 5 seeds" in text
    assert "its looks' seed variance pooled across up to 3 configurations, which assumes every" in text


def rewrite_last(sweep_dir, change) -> None:
    path = sweep_dir / looks_log.FILE
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    change(lines[-1])
    path.write_text("".join(json.dumps(doc) + "\n" for doc in lines))


def _never_ran(doc):
    doc["pooled"][1]["members"] = ["a-s1", "a-s3"]  # a-s3 never ran


def _other_step(doc):
    doc["pooled"][0]["steps"] = [8, 9]  # d-s2 at a step the run dir does not have


def _own_member(doc):
    doc["pooled"].append({"config": "b", "members": ["b-s1", "b-s2"], "steps": [8, 8]})  # b's own seeds, twice


def _past_n(doc):
    doc["pooled"][0]["members"] += ["d-s3"]  # more of d than the look's own 2 seeds
    doc["pooled"][0]["steps"] += [8]


def _dropped(doc):
    del doc["pooled"]  # as if unpooled


@pytest.mark.parametrize("change", [_never_ran, _other_step, _own_member, _past_n, _dropped])
def test_a_corrupted_pooled_member_refuses_the_report(finished, change, capsys):
    sweep_dir, lock, table, _ = finished
    rewrite_last(sweep_dir, change)
    with pytest.raises(SweepError) as err:
        check_looks(lock, sweep_dir, table)
    assert err.value.code == BAD_DATA
    assert str(err.value).startswith(f"{sweep_dir / looks_log.FILE}:{len(looks_log.read(sweep_dir))}: b drift_hi < 5% "
                                     "at 2 seeds disagrees with the run dirs: pooled "), str(err.value)
    assert tatu_main(["sweep", "report", "pool", "--sweeps", str(sweep_dir.parent)]) == BAD_DATA
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith(f"tatu sweep: {sweep_dir / looks_log.FILE}:")

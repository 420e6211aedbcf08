"""The demo's time-left estimate (ops/demo_time.py): its arithmetic, by hand."""
from __future__ import annotations

import pytest

from tatu.ops.demo_time import RUN_REPORT_SECONDS, JobEstimate, TrunkProgress, job_estimate
from tatu.sweep.run import cost
from tatu.sweep.plan.member import Member

REQUIRED = {"TATU_DATA": "/nowhere/data", "TATU_SEED_CKPT": "/nowhere/seed"}  # only parsed


def member(name: str, replay: str) -> Member:
    env = {**REQUIRED, "SFT_GE": "8", "REPLAY_N": replay, "TATU_MICRO_BATCH": "8", "TATU_SEQ_LEN": "128",
           "MIX_STEPS_LIMIT": "48", "EVAL_EVERY": "8", "TATU_THREADS": "1"}
    return Member(name, f"s.{name}", "compare", name[:-3], {}, 1, env)


def test_the_time_left_is_trunk_plus_scheduled_members_plus_reports(monkeypatch):
    monkeypatch.setattr(cost, "cores", lambda: 2)
    progress = TrunkProgress(steps_done=100, steps_total=1000, step_seconds=(0.3, 0.4, 0.5), eval_seconds=(4.0, 6.0),
                             evals_total=6, slot_tokens=4 * 8 * 128, threads=2)
    members = [member(f"n0-s{s}", "0") for s in (1, 2, 3)] + [member(f"n6-s{s}", "6") for s in (1, 2, 3)]
    got = job_estimate(progress, members, k=2)
    # by hand: trunk 900 steps x 0.4 s + 4 evals x 5 s = 380 s
    assert got.trunk_s == pytest.approx(380.0)
    rate, factor = 0.4 / 4096, cost.thread_factor(2, 1)  # 1 thread each, two at once on 2 cores
    n0 = 48 * 8 * 8 * 128 * rate * factor + 8 * 5.0
    n6 = 48 * 14 * 8 * 128 * rate * factor + 8 * 5.0
    # K=2 in plan order: A=n0 B=n0; A=2n0; B=n0+n6; A=2n0+n6; B=n0+2n6
    assert got.sweep_s == pytest.approx(max(2 * n0 + n6, n0 + 2 * n6))
    assert got.reports_s == pytest.approx(7 * 5.0 + RUN_REPORT_SECONDS)
    assert got.total_s == pytest.approx(got.trunk_s + got.sweep_s + got.reports_s)
    assert got.line().startswith("time left: ~")


def test_no_estimate_before_the_trunk_logs_a_step():
    progress = TrunkProgress(0, 1000, (), (), 6, 4096, 2)
    assert job_estimate(progress, [member("n0-s1", "0")], 2) is None
    assert JobEstimate(60, 120, 30).line().startswith("time left: ~3m30s (trunk 1m00s, sweep 2m00s, reports 30s;")

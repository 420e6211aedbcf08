"""The demo's conclusions survive another CPU's arithmetic.

Another CPU sums in another order (its vector width, MKL's code path). ATen's
ATEN_CPU_CAPABILITY=default (no vector kernels) and MKL_CBWR=COMPATIBLE (MKL's most portable
branch) reproduce that on this machine. The tiny demo's seed comparison under both must reach the
same verdict and the same sign for every judged change whose CI excludes zero
(tatu.sweep.report.conclusions), while its numbers differ in their last bits (else the kernels did not change).
"""
from __future__ import annotations

import dataclasses

import pytest

from demo_world import run_tiny_demo
from run_records import rejudged as other_rule

from tatu.daemon.logs import read_events
from tatu.ops.demo import SWEEP
from tatu.sweep.judge.verdict import decide
from tatu.sweep.plan.lock import read_lock
from tatu.sweep.report.conclusions import conclusions, disagreements
from tatu.sweep.judge.sweep_report import read_report_json

OTHER_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}


def _report(demo) -> dict:
    return read_report_json(demo.out / "sweeps" / SWEEP / "report")


def _losses(demo) -> list[float]:
    runs = sorted((demo.out / "sweeps" / SWEEP / "runs").iterdir())
    return [e["loss"] for run in runs for e in read_events(run / "events.jsonl") if e["event"] == "step"]


@pytest.mark.slow
def test_demo_conclusions_hold_under_another_cpus_kernels(tiny_demo, tmp_path):
    other = run_tiny_demo(tmp_path / "demo", OTHER_KERNELS)
    # it ran under the other kernels: the demo's machine line and every member's own start line say so
    assert "ATen kernels DEFAULT (ATEN_CPU_CAPABILITY=default)" in other.stdout
    assert "MKL_CBWR=COMPATIBLE (env)" in other.stdout
    for run in (other.out / "sweeps" / SWEEP / "runs").iterdir():
        assert "CPU matmul sums: MKL_CBWR=COMPATIBLE (env)" in (run / "run.log").read_text(), run
    # ... and they sum in another order: the same steps, other bits
    ours, theirs = _losses(tiny_demo), _losses(other)
    assert len(ours) == len(theirs) and ours != theirs
    here, there = _report(tiny_demo), _report(other)
    assert here.plan_portable_hash == there.plan_portable_hash
    assert disagreements(conclusions(here), conclusions(there)) == []

    # The check can fail: the other run's numbers, judged by a rule whose threshold sits inside a
    # CI, pass another set of configurations than this run's rule did.
    plan = read_lock(other.out / "sweeps" / SWEEP).plan
    configs = there.compare.configs
    passed = conclusions(here).passed
    if passed:  # the first passing configuration's drift CI straddles the new threshold: it fails
        drift = next(c for c in configs if c.key == passed[0]).stats["drift"]
        rule = f"first config such that drift_hi < {drift.change.value:.6f}"
    else:  # none passed: a threshold inside the highest CI lets every lower bound under it
        drift = max((c.stats["drift"] for c in configs), key=lambda d: d.change.lo)
        rule = f"first config such that drift_lo < {drift.change.value:.6f}"
    assert drift.change.lo < drift.change.value < drift.change.hi
    rejudged = dataclasses.replace(there, verdict=decide(other_rule(plan, rule), list(configs)))
    assert disagreements(conclusions(here), conclusions(rejudged))

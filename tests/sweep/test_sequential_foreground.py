"""A sequential sweep for real (slow): `tatu sweep start PLAN --foreground` with daemon members on the
session's tiny trunk: tests/sweep_world.py's sequential plan, whose first configuration passes at its
one look and whose second never runs. Its coordinator is SIGKILLed once the first member has its verdict and
started again: the looks log holds one look, the same members ran, `tatu sweep start` then says
the sweep is finished, and `tatu sweep report` recomputes the look from the real scores and agrees."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from sweep_world import sequential_plan_world, start_foreground
from tiny_world import clean_environ

from tatu.sweep.judge import looks_log

pytestmark = pytest.mark.slow


def test_kill_9_of_a_foreground_sequential_sweep_then_start_again(tmp_path_factory, tiny_trunk):
    root, plan = sequential_plan_world(tmp_path_factory, tiny_trunk, "seqfg")
    sweeps = root / "sweeps"
    proc = start_foreground(plan, sweeps, wait=False)
    first_verdict = sweeps / "seqfg" / "runs" / "seqfg.first-s1" / "verdict.json"
    deadline = time.monotonic() + 600
    while not first_verdict.exists():  # between members: the first has its result
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "no member finished in 600 s"
        time.sleep(0.05)
    # the members get the coordinator's death (SIGTERM: they save and exit); started again once they
    # have, as test_foreground_run.py does (a daemon still shutting down holds its control socket)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    psutil.wait_procs(children, timeout=120)

    again = start_foreground(plan, sweeps)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "verdict: config=first (first config such that drift_hi < 50%); sequential obf" in again.stdout, again.stdout
    looks = looks_log.read(sweeps / "seqfg")
    assert [(l.config, l.look.n_seeds, l.look.decision) for l in looks] == [("first", 3, "pass")]
    assert looks[0].members == ("seqfg.first-s1", "seqfg.first-s2", "seqfg.first-s3")
    assert sorted(p.name for p in (sweeps / "seqfg" / "runs").iterdir()) == [
        "seqfg.first-s1", "seqfg.first-s2", "seqfg.first-s3"]  # `second` never ran

    third = start_foreground(plan, sweeps)
    assert third.returncode == 0 and "already finished" in third.stdout, third.stdout
    report = subprocess.run([sys.executable, "-m", "tatu.ops.cli", "sweep", "report", "seqfg", "--sweeps", str(sweeps)],
                            env=clean_environ(), capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "PROVISIONAL" not in report.stdout

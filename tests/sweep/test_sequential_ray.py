"""A sequential sweep through the Ray backend (slow; a local Ray cluster): the same coordinator and
schedule as the foreground and systemd backends, so the same looks and members as
test_sequential_foreground.py (tests/sweep_world.py's sequential plan); its driver (the coordinator) is SIGKILLed once the first
member has its verdict and started again."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from sweep_world import sequential_plan_world
from tiny_world import clean_environ

from tatu.sweep.judge import looks_log

pytestmark = pytest.mark.slow
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # a one-node cluster on loopback (as test_ray.py)


def start(plan, sweeps, address) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tatu.ops.cli", "sweep", "start", str(plan), "--backend", "ray",
                             "--address", address, "--poll", "0.3", "--sweeps", str(sweeps)],
                            env=clean_environ(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_sequential_sweep_on_ray_killed_and_started_again(tmp_path_factory, tiny_trunk, ray_cluster):
    root, plan = sequential_plan_world(tmp_path_factory, tiny_trunk, "seqray", extra=", TATU_THREADS = 1")
    sweeps = root / "sweeps"
    proc = start(plan, sweeps, ray_cluster)
    first_verdict = sweeps / "seqray" / "runs" / "seqray.first-s1" / "verdict.json"
    deadline = time.monotonic() + 600
    while not first_verdict.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "no member finished in 600 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)

    again = start(plan, sweeps, ray_cluster)
    out = again.communicate(timeout=900)[0]
    assert again.returncode == 0, out
    assert "verdict: config=first (first config such that drift_hi < 50%); sequential obf" in out, out
    looks = looks_log.read(sweeps / "seqray")
    assert [(l.config, l.look.n_seeds, l.look.decision) for l in looks] == [("first", 3, "pass")]
    assert sorted(p.name for p in (sweeps / "seqray" / "runs").iterdir()) == [
        "seqray.first-s1", "seqray.first-s2", "seqray.first-s3"]

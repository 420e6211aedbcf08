"""kill -9 of a sequential sweep's coordinator, then started again, reaches the same decisions: the
looks are logged before anything starts from them and recomputed from the files, so the restarted
one logs only what is missing. The coordinator is tests/sequential_world.py's (the real
Coordinator and schedule; instant members), blocked at a hold point until the test kills it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sequential_world import HELD, HOLD, ran, write_sweep

from tatu.sweep.judge import looks_log

WORLD = Path(__file__).resolve().parent.parent / "sequential_world.py"
RULE = "first config such that drift_hi < 5%"
CONFIGS = "d = { REPLAY_N = 1 }\na = { REPLAY_N = 0 }\nb = { REPLAY_N = 2 }\nc = { REPLAY_N = 4 }\n"


def coordinator_process(sweep_dir: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORLD), str(sweep_dir)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until `path` appears (the coordinator announces its hold point); its output if it ended first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the coordinator ended ({proc.returncode}) before its hold point:\n{proc.stdout.read()}")
        assert time.monotonic() < deadline, f"no {path} after {timeout}s"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The same sweep run through without a kill."""
    root = tmp_path_factory.mktemp("reference")
    sweep_dir = write_sweep(root, "seq", RULE, configs=CONFIGS)
    proc = coordinator_process(sweep_dir, {**os.environ, "RUNTIME_DIRECTORY": str(root / "rt")})
    assert proc.wait(timeout=120) == 0, proc.stdout.read()
    return sweep_dir


# the hold point, and the looks logged when the coordinator is killed there: a member's start comes
# after the look that allowed it is in the log (d-s4 after d's look at 3 seeds, b-s1 after a's fail)
HOLDS = {"finish:d-s3": [], "start:d-s4": [("d", 3, "continue")],
         "finish:a-s2": [("d", 3, "continue"), ("d", 4, "continue"), ("d", 5, "fail")],
         "start:b-s1": [("d", 3, "continue"), ("d", 4, "continue"), ("d", 5, "fail"), ("a", 3, "fail")]}


@pytest.mark.parametrize("hold", list(HOLDS))
def test_kill_9_then_start_again_reaches_the_same_decisions(tmp_path, reference, hold):
    env = {**os.environ, "RUNTIME_DIRECTORY": str(tmp_path / "rt")}
    sweep_dir = write_sweep(tmp_path / "killed", "seq", RULE, configs=CONFIGS)
    proc = coordinator_process(sweep_dir, {**env, HOLD: hold})
    wait_for(sweep_dir / HELD, proc)
    logged_at_kill = looks_log.read(sweep_dir)
    assert [(l.config, l.look.n_seeds, l.look.decision) for l in logged_at_kill] == HOLDS[hold]
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    again = coordinator_process(sweep_dir, env)
    out = again.communicate(timeout=120)[0]
    assert again.returncode == 0, out

    logged = looks_log.read(sweep_dir)
    assert logged[:len(logged_at_kill)] == logged_at_kill  # the restart appended, never rewrote
    keys = [(l.config, l.criterion, l.look.n_seeds) for l in logged]
    assert len(keys) == len(set(keys))  # no look logged twice
    assert logged == looks_log.read(reference)  # the same looks, numbers and decisions as without the kill
    assert ran(sweep_dir) == ran(reference)

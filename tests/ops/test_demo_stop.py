"""A demo whose trunk is stopped (its daemon gets SIGTERM, as `systemctl --user stop` sends) ends
there, saying so, instead of starting a sweep from a trunk that has no final checkpoint; the same
command again continues the trunk from its resume state and finishes (the tiny scale)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from demo_world import demo_packages_problem
from strict import cannot_run
from tiny_world import clean_environ

from tatu.daemon.logs import read_events

pytestmark = pytest.mark.slow


def test_a_stopped_trunk_ends_the_demo_and_the_next_demo_continues_it(tmp_path):
    problem = demo_packages_problem()
    if problem:
        cannot_run(f"demo packages unavailable: {problem}")
    out = tmp_path / "demo"
    command = [sys.executable, "-m", "tatu.ops.demo", "--scale", "tiny", "--foreground", "--out", str(out)]
    demo = subprocess.Popen(command, env=clean_environ(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    events = out / "runs" / "trunk" / "events.jsonl"
    deadline = time.monotonic() + 600
    while not (events.is_file() and any(e["event"] == "step" for e in read_events(events))):
        assert demo.poll() is None, demo.stdout.read()
        assert time.monotonic() < deadline, "the trunk logged no step in 600 s"
        time.sleep(0.02)
    daemon = next(p for p in psutil.Process(demo.pid).children(recursive=True) if "tatu.daemon" in " ".join(p.cmdline()))
    # frozen while the stop arrives, so that it lands before the trunk's last step (6 here)
    daemon.send_signal(signal.SIGSTOP)
    daemon.send_signal(signal.SIGTERM)
    daemon.send_signal(signal.SIGCONT)
    printed = demo.communicate(timeout=600)[0]
    stopped_at = [e["step"] for e in read_events(events) if e["event"] == "checkpoint" and e["reason"] == "stop"]
    assert demo.returncode == 1 and len(stopped_at) == 1 and stopped_at[0] < 6, printed[-2000:]
    assert printed.rstrip().splitlines()[-1] == (f"demo: the trunk ({out / 'runs' / 'trunk'}) was stopped at step "
                                                 f"{stopped_at[0]} of 6, before its end, its resume state saved; "
                                                 "`make demo` again continues it")
    assert "=== SFT without and with replay" not in printed and not (out / "sweeps").exists()

    again = subprocess.run(command, env=clean_environ(), capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    resumed = [e["step"] for e in read_events(events) if e["event"] == "resumed"]
    assert resumed == stopped_at
    assert "=== done in" in again.stdout

"""SIGINT and SIGTERM: Ctrl-C on a foreground run saves and exits 0, a second one forces the exit,
and a SIGTERM while the daemon is still loading is a clean stop (real signals, real processes)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiny_world import clean_environ, sft_env, wait_for

from tatu.daemon.logs import read_events
from tatu.model.checkpoint import load_checkpoint


@pytest.mark.slow
def test_ctrl_c_on_a_foreground_run_saves_and_exits_0(tiny_trunk, tmp_path):
    env = sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=100_000, EVAL_EVERY=1000, TATU_CKPT_EVERY=1000)
    events_file = tmp_path / "run" / "events.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "tatu.ops.cli", "run"], env={**clean_environ(), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def steps():
        return events_file.exists() and [e for e in read_events(events_file) if e["event"] == "step"][2:]

    wait_for(steps, 180, "three steps")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    events = read_events(events_file)
    last_step = [e["step"] for e in events if e["event"] == "step"][-1]
    saved = [e for e in events if e["event"] == "checkpoint"][-1]
    assert saved["reason"] == "stop" and saved["step"] == last_step
    assert load_checkpoint(tmp_path / "run" / "state").extra_json["resume"]["step"] == last_step


def test_a_second_ctrl_c_forces_the_exit():
    """The handler itself (a real signal to this process): the first asks, the second insists."""
    from tatu.daemon import signals

    asked = []
    signals.install()
    try:
        signals.on_stop(lambda: asked.append(True))
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.stop_requested() and asked == [True]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)  # the handler runs at the next bytecode boundary of the main thread
    finally:
        signals.uninstall()
    assert not signals.stop_requested()


def sigterm_caught(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def test_a_sigterm_while_loading_is_a_clean_stop(tiny_trunk, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tatu.daemon"], env={**clean_environ(), **sft_env(tiny_trunk, tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: proc.poll() is not None or sigterm_caught(proc.pid), 60, "the SIGTERM handler", interval=0.002)
    # caught before torch is even loaded: the window where the process used to die outright
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert "libtorch" not in maps
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "stop requested before the baseline eval" in out

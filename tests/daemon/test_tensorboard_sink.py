"""The daemon's TensorBoard (TATU_TENSORBOARD, daemon/tensorboard.py) read back with TensorBoard's
own reader: every point equals events.jsonl's number at its step; a run killed with -9 and
restarted has each step once; an unwritable or full dir is a warning and every step still runs;
without the tensorboard package the run says so and goes on."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tb_reader import assert_curves_equal_events, expected_points, read_back, require_tensorboard
from tiny_world import HELD_OUT_EXTRA, clean_environ, sft_env, wait_for

from tatu.daemon.logs import read_events
from tatu.daemon.main import main as daemon_main


@pytest.fixture(autouse=True)
def _tensorboard():
    require_tensorboard()


def warnings_in(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("WARNING: TensorBoard")]


@pytest.mark.slow  # five_sets: a run with 5 eval sets and a task
def test_every_point_of_a_run_equals_its_events_at_that_step(five_sets):
    events = read_events(five_sets / "events.jsonl")
    back = read_back(five_sets / "tb")
    assert_curves_equal_events(back, events)
    tags = set(back.scalars)
    for name in HELD_OUT_EXTRA:  # the fixture's held-out sets and task are really there
        assert {f"eval/{name}/ppl", f"change/{name}/value", f"change/{name}/lo", f"change/{name}/hi"} <= tags
    assert {"task/numbers/acc", "task/numbers/acc_norm", "drift_tronco/hi", "train/loss", "train/lr", "train/grad_norm",
            "train/tokens_per_s"} <= tags
    (config,) = [e for e in events if e["event"] == "config"]
    width = max(len(name) for name in config["config"])
    assert back.texts["config"] == [(0, "\n".join(f"    {name:<{width}} = {value} [{config['origins'][name]}]"
                                                  for name, value in config["config"].items()))]
    assert config["config"]["TATU_TENSORBOARD"] == "auto" and config["origins"]["TATU_TENSORBOARD"] == "default"
    verdict = json.loads((five_sets / "verdict.json").read_text())
    assert back.texts["verdict"] == [(4, verdict["line"])]
    assert f"TensorBoard: {five_sets / 'tb'} (TATU_TENSORBOARD=auto [default])" in (five_sets / "run.log").read_text()


@pytest.mark.slow  # two daemon processes, one of them killed
@pytest.mark.parametrize("before", ["auto", "off"])
def test_a_run_killed_and_restarted_has_every_step_once(tiny_trunk, tmp_path, before):
    """Killed after a step its resume state does not hold: the restart redoes it. With TensorBoard
    off before the kill, the restart writes the whole run from events.jsonl."""
    settings = dict(MIX_STEPS_LIMIT=10, EVAL_EVERY=2, TATU_CKPT_EVERY=3, TATU_GEN_PROMPTS=0)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "tatu.daemon"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**clean_environ(), **sft_env(tiny_trunk, tmp_path, TATU_TENSORBOARD=before, **settings)})

    def done() -> list[dict]:
        return read_events(run_dir / "events.jsonl") if (run_dir / "events.jsonl").is_file() else []

    try:
        wait_for(lambda: any(e["event"] == "step" and e["step"] >= 4 for e in done()) or proc.poll() is not None,
                 120, "step 4")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    events = done()
    saved = max(e["step"] for e in events if e["event"] == "checkpoint")
    last = max(e["step"] for e in events if e["event"] == "step")
    assert saved < last < 10, (saved, last)  # the restart redoes steps saved+1..last
    assert (run_dir / "tb").is_dir() == (before == "auto")

    assert daemon_main(sft_env(tiny_trunk, tmp_path, **settings)) == 0
    events = read_events(run_dir / "events.jsonl")
    redone = [e["step"] for e in events if e["event"] == "step"]
    assert len(redone) > len(set(redone))  # events.jsonl holds both copies of the redone steps
    back = read_back(run_dir / "tb")
    assert_curves_equal_events(back, events)
    assert [s for s, _ in back.scalars["train/loss"]] == list(range(1, 11))
    assert [s for s, _ in back.scalars["drift/value"]] == [0, 2, 4, 6, 8, 10]
    assert [s for s, _ in back.texts["config"]] == [0, saved]  # the configuration of each start


def test_an_unwritable_dir_is_one_warning_naming_it_and_the_run_takes_every_step(tiny_trunk, tmp_path, capsys):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")  # TATU_TENSORBOARD=DIR writes DIR/TATU_RUN: under a file, not even root can
    env = sft_env(tiny_trunk, tmp_path / "out", MIX_STEPS_LIMIT=2, EVAL_EVERY=1, TATU_GEN_PROMPTS=0,
                  TATU_TENSORBOARD=str(blocker))
    assert daemon_main(env) == 0
    out = capsys.readouterr().out
    (warning,) = warnings_in(out)
    assert warning.startswith(f"WARNING: TensorBoard: cannot write {blocker / 'run'}: ") and "Not a directory" in warning
    assert f"TensorBoard: {blocker / 'run'} (TATU_TENSORBOARD={blocker} [env])" in out
    events = read_events(tmp_path / "out" / "run" / "events.jsonl")
    assert [e["step"] for e in events if e["event"] == "step"] == [1, 2]
    assert (tmp_path / "out" / "run" / "verdict.json").is_file()


def test_a_full_disk_is_one_warning_and_the_run_takes_every_step(tiny_trunk, tmp_path, small_tmpfs, capsys):
    disk = small_tmpfs("4k")  # one page: the start's configuration fits, the first evals do not
    env = sft_env(tiny_trunk, tmp_path / "out", MIX_STEPS_LIMIT=4, EVAL_EVERY=1, TATU_GEN_PROMPTS=0,
                  TATU_TENSORBOARD=str(disk))
    assert daemon_main(env) == 0
    (warning,) = warnings_in(capsys.readouterr().out)
    assert warning.startswith(f"WARNING: TensorBoard: cannot write {disk / 'run'}: No space left on device (")
    events = read_events(tmp_path / "out" / "run" / "events.jsonl")
    assert [e["step"] for e in events if e["event"] == "step"] == [1, 2, 3, 4]
    assert (tmp_path / "out" / "run" / "verdict.json").is_file()
    back = read_back(disk / "run")  # what did fit reads back, and is right
    assert "config" in back.texts and len(back.scalars.get("train/loss", [])) < 4
    got = {(tag, step): value for tag, points in back.scalars.items() for step, value in points}
    assert got.items() <= expected_points(events).items()


def test_without_the_tensorboard_package_the_run_says_so_and_goes_on(tiny_trunk, tmp_path, without_tensorboard):
    env = sft_env(tiny_trunk, tmp_path / "out", MIX_STEPS_LIMIT=1, EVAL_EVERY=1, TATU_GEN_PROMPTS=0)
    proc = subprocess.run([sys.executable, "-m", "tatu.daemon"], capture_output=True, text=True, timeout=300,
                          env={**clean_environ(), **without_tensorboard, **env})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("TensorBoard:")]
    assert line.startswith("TensorBoard: off (TATU_TENSORBOARD=auto [default]: the tensorboard package does not import (")
    assert "no tensorboard in this test" in line and "`pip install tensorboard` turns it on" in line
    assert not (tmp_path / "out" / "run" / "tb").exists()
    assert (tmp_path / "out" / "run" / "verdict.json").is_file()


def test_the_retention_terms_values_are_curves_equal_to_their_events(tiny_trunk, tmp_path):
    """A run with TATU_ANCHOR and TATU_DISTILL: its step records' penalty and distill are points too."""
    env = sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=3, EVAL_EVERY=3, TATU_GEN_PROMPTS=0, TATU_LR="1e-2",
                  TATU_ANCHOR="l2sp", TATU_ANCHOR_WEIGHT="10", TATU_DISTILL="1", TATU_DISTILL_WEIGHT="0.5")
    assert daemon_main(env) == 0
    events = read_events(tmp_path / "run" / "events.jsonl")
    steps = [e for e in events if e["event"] == "step"]
    assert all("penalty" in e and "distill" in e for e in steps)
    back = read_back(tmp_path / "run" / "tb")
    assert_curves_equal_events(back, events)
    for field in ("penalty", "distill"):
        assert back.scalars[f"train/{field}"] == [(e["step"], e[field]) for e in steps]
    assert back.scalars["train/penalty"][-1][1] > 0 and back.scalars["train/distill"][-1][1] > 0

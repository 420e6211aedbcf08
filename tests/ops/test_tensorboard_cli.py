"""`tatu tensorboard RUN_OR_SWEEP... [--out DIR]` on a run made with TATU_TENSORBOARD=off: the
curves the daemon would have written, read back; nothing twice; one line and its exit code for a
bad path (nothing written), an unwritable --out and a missing package. (A sweep's sessions:
tests/sweep/test_configs_run.py.)"""
from __future__ import annotations

import subprocess
import sys

import pytest

from tb_reader import assert_curves_equal_events, read_back, require_tensorboard
from tiny_world import clean_environ, sft_env

from tatu.daemon.logs import read_events
from tatu.daemon.main import main as daemon_main
from tatu.ops import cli
from tatu.tensorboard.writer import EVENT_FILES


@pytest.fixture(scope="module")
def dark_run(tiny_trunk, tmp_path_factory):
    """A 2-step run with TensorBoard off: its run dir, with no tb/."""
    out = tmp_path_factory.mktemp("dark")
    assert daemon_main(sft_env(tiny_trunk, out, MIX_STEPS_LIMIT=2, EVAL_EVERY=1, TATU_GEN_PROMPTS=0,
                               TATU_TENSORBOARD="off")) == 0
    assert not (out / "run" / "tb").exists()
    return out / "run"


def test_a_run_made_without_tensorboard_gets_its_curves_once(dark_run, tmp_path, capsys):
    require_tensorboard()
    assert cli.main(["tensorboard", str(dark_run), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{tmp_path / 'run'}: 1 config, 3 eval, 2 step, 1 verdict (records of {dark_run / 'events.jsonl'})",
                   f"tensorboard --logdir {tmp_path}"]
    events = read_events(dark_run / "events.jsonl")
    back = read_back(tmp_path / "run")
    assert_curves_equal_events(back, events)
    assert back.texts["verdict"] == [(2, [e for e in events if e["event"] == "verdict"][0]["line"])]
    files = sorted((tmp_path / "run").glob(EVENT_FILES))
    assert cli.main(["tensorboard", str(dark_run), "--out", str(tmp_path)]) == 0
    assert "nothing new" in capsys.readouterr().out
    assert sorted((tmp_path / "run").glob(EVENT_FILES)) == files


def test_a_path_that_is_neither_a_run_nor_a_sweep_is_65_before_anything_is_written(dark_run, tmp_path, capsys):
    require_tensorboard()
    assert cli.main(["tensorboard", str(dark_run), str(tmp_path / "nope"), "--out", str(tmp_path / "tb")]) == 65
    assert capsys.readouterr().err == (f"tatu tensorboard: {tmp_path / 'nope'}: neither a run dir (no events.jsonl) "
                                       f"nor a sweep dir (no plan.lock.json)\n")
    assert not (tmp_path / "tb").exists()


def test_an_unwritable_out_is_74_naming_it(dark_run, tmp_path, capsys):
    require_tensorboard()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert cli.main(["tensorboard", str(dark_run), "--out", str(blocker)]) == 74
    err = capsys.readouterr().err
    assert err.startswith(f"tatu tensorboard: TensorBoard: cannot write {blocker / 'run'}: ") and "Not a directory" in err


def test_without_the_tensorboard_package_it_is_78_with_the_fix(dark_run, tmp_path, without_tensorboard):
    proc = subprocess.run([sys.executable, "-m", "tatu.ops.cli", "tensorboard", str(dark_run), "--out", str(tmp_path / "tb")],
                          env={**clean_environ(), **without_tensorboard}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 78
    assert proc.stderr.startswith("tatu tensorboard: the tensorboard package does not import (no tensorboard in this test)")
    assert proc.stderr.rstrip().endswith("`pip install tensorboard` (or the project's [dev] extra)")
    assert not (tmp_path / "tb").exists()

"""The demo's shipped trunk (data/demo/trunk/): every byte as its manifest says, a checkpoint the
daemon loads, a run.log that shows it finished; `python -m tatu.ops.trunk` (what `make trunk` runs)
writes one the same checks pass."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from demo_world import demo_packages_problem
from strict import cannot_run

from tatu.ops import shipped_trunk
from tatu.ops.shipped_trunk import FLAT_LIMIT, ShippedTrunkError, flat_end, verify


def test_the_shipped_trunk_matches_its_manifest_and_loads():
    from tatu.model.checkpoint import load_checkpoint

    manifest = verify()
    assert manifest.command == "make trunk" and manifest.machine.startswith("machine: ")
    assert {"final/model.safetensors", "final/manifest.json", "run.log", "trunk.env"} <= set(manifest.files)
    ckpt = load_checkpoint(shipped_trunk.SHIPPED / "final")  # the checkpoint's own manifest, checked again
    assert ckpt.tokenizer.vocab_size == 2048


def test_the_shipped_trunk_is_finished():
    end = flat_end(shipped_trunk.SHIPPED / "run.log")
    assert end.end == 4 * (end.end - end.start), (end.start, end.end)  # the last quarter of its steps
    assert set(end.changes) == {"ptVal", "enRuler"}
    assert all(abs(c) < FLAT_LIMIT for c in end.changes.values()), end.line()
    assert end.flat and "trunk finished" in end.line()


@pytest.fixture
def trunk_copy(tmp_path):
    copy = tmp_path / "trunk"
    shutil.copytree(shipped_trunk.SHIPPED, copy)
    return copy


def test_a_changed_byte_is_named(trunk_copy):
    weights = trunk_copy / "final" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(ShippedTrunkError, match=r"final/model\.safetensors: sha256 .* is not"):
        verify(trunk_copy)


def test_a_missing_or_unlisted_file_is_named(trunk_copy):
    (trunk_copy / "run.log").rename(trunk_copy / "other.log")
    with pytest.raises(ShippedTrunkError, match=r"run\.log: listed in trunk\.json but missing"):
        verify(trunk_copy)
    (trunk_copy / "other.log").rename(trunk_copy / "run.log")
    verify(trunk_copy)
    (trunk_copy / "final" / "extra.bin").write_bytes(b"x")
    with pytest.raises(ShippedTrunkError, match=r"final/extra\.bin: not listed"):
        verify(trunk_copy)


def _log(tmp_path, evals):
    lines = [f"2026-12-07T23:00:00 info    EVAL {step}: sftHeld 9.0 ptVal {pt} enRuler {en} drift +0.0% (1.0s)"
             for step, pt, en in evals]
    path = tmp_path / "run.log"
    path.write_text("\n".join(["2026-12-07T23:00:00 info      EVAL_EVERY             = 250", *lines]) + "\n")
    return path


def test_flat_end_compares_the_last_eval_with_the_one_at_three_quarters(tmp_path):
    log = _log(tmp_path, [(0, 2000, 2000), (250, 100.0, 90.0), (500, 80.0, 70.0), (750, 79.0, 70.7), (1000, 78.5, 70.0)])
    end = flat_end(log)
    assert (end.start, end.end) == (750, 1000)
    assert end.changes["ptVal"] == pytest.approx(78.5 / 79.0 - 1) and end.changes["enRuler"] == pytest.approx(70.0 / 70.7 - 1)
    assert end.flat
    steep = flat_end(_log(tmp_path, [(0, 2000, 2000), (750, 90.0, 70.0), (1000, 86.0, 70.0)]))
    assert not steep.flat and "NOT finished" in steep.line() and "ptVal -4.4%" in steep.line()


@pytest.mark.slow
def test_make_trunks_recipe_writes_a_trunk_that_verifies(tmp_path):
    problem = demo_packages_problem()
    if problem:
        cannot_run(problem)
    trunk = tmp_path / "trunk"
    proc = subprocess.run([sys.executable, "-m", "tatu.ops.trunk", "--scale", "tiny", "--out", str(tmp_path / "build"),
                           "--trunk", str(trunk)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    manifest = verify(trunk)
    assert manifest.command == "python -m tatu.ops.trunk --scale tiny"
    assert f"model.safetensors sha256 {manifest.files['final/model.safetensors']}" in proc.stdout
    assert flat_end(trunk / "run.log").end == 6  # the tiny scale's steps

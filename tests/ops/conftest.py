"""The tiny demo, run once per session: its pipeline test and its kernel-change test share it."""
from __future__ import annotations

from pathlib import Path

import pytest

from demo_world import DemoRun, run_tiny_demo
from tiny_world import sft_env


@pytest.fixture(scope="session")
def tiny_demo(built_once) -> DemoRun:
    """The tiny demo under this machine's own kernels (whatever ATEN_CPU_CAPABILITY and MKL_CBWR
    the environment holds: none, on CI)."""
    def build(root: Path) -> None:
        (root / "stdout.txt").write_bytes(run_tiny_demo(root / "demo").stdout.encode())  # as printed, byte for byte

    root = built_once("demo", build)  # one demo for every xdist worker too
    return DemoRun(root / "demo", (root / "stdout.txt").read_bytes().decode())


@pytest.fixture(scope="session")
def interp_world(tiny_trunk, built_once) -> dict:
    """A seed and its fine-tune for `tatu interpolate`: the session's tiny trunk and a 4-step SFT
    run from it. {"root", "data", "seed", "ft"}; write elsewhere (tmp_path), the tests share it."""
    from tatu.daemon.main import main as daemon_main

    def build(root: Path) -> None:
        assert daemon_main(sft_env(tiny_trunk, root / "runs", TATU_RUN="ft", MIX_STEPS_LIMIT=4, EVAL_EVERY=4,
                                   TATU_GEN_PROMPTS=0, TATU_LR="3e-3")) == 0

    root = built_once("interp", build)  # one fine-tune for every xdist worker too
    return {"root": root, "data": tiny_trunk["data"], "seed": tiny_trunk["trunk"], "ft": root / "runs" / "ft" / "final"}

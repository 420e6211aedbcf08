"""The tiny demo, run once per session: its pipeline test and its kernel-change test share it."""
from __future__ import annotations

import pytest

from demo_world import DemoRun, run_tiny_demo
from tiny_world import sft_env


@pytest.fixture(scope="session")
def tiny_demo(tmp_path_factory) -> DemoRun:
    """The tiny demo under this machine's own kernels (whatever ATEN_CPU_CAPABILITY and MKL_CBWR
    the environment holds: none, on CI)."""
    return run_tiny_demo(tmp_path_factory.mktemp("demo") / "demo")


@pytest.fixture(scope="session")
def interp_world(tiny_trunk, tmp_path_factory) -> dict:
    """A seed and its fine-tune for `tatu interpolate`: the session's tiny trunk and a 4-step SFT
    run from it. {"root", "data", "seed", "ft"}; write elsewhere (tmp_path), the tests share it."""
    from tatu.daemon.main import main as daemon_main

    root = tmp_path_factory.mktemp("interp")
    assert daemon_main(sft_env(tiny_trunk, root / "runs", TATU_RUN="ft", MIX_STEPS_LIMIT=4, EVAL_EVERY=4,
                               TATU_GEN_PROMPTS=0, TATU_LR="3e-3")) == 0
    return {"root": root, "data": tiny_trunk["data"], "seed": tiny_trunk["trunk"], "ft": root / "runs" / "ft" / "final"}

"""A tiny world for sweep tests: tests/tiny_world.py's data, a trunk pretrained through the
daemon, and plan files whose members are a few steps long."""
from __future__ import annotations

import os
from pathlib import Path

from tiny_world import base_env, build_world



def build_trunk(root: Path) -> tuple[Path, Path]:
    """(data dir, trunk checkpoint) under root; the trunk's socket in a private runtime dir."""
    from tatu.daemon.main import main as daemon_main

    data = build_world(root)
    runtime = root / "trunk-rt"
    runtime.mkdir(mode=0o700, exist_ok=True)
    saved = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    try:
        env = base_env(data, root / "runs", TATU_RUN="trunk", TATU_MODE="pretrain", SFT_GE=2, MIX_STEPS_LIMIT=24,
                       EVAL_EVERY=12, TATU_LR="3e-3", TATU_GEN_PROMPTS=0)
        assert daemon_main(env) == 0
    finally:
        if saved is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = saved
    return data, root / "runs" / "trunk" / "final"


def plan_text(name: str, data: Path, trunk: Path, seeds=(1, 2), replay=(0, 2), steps: int = 4, tune: str = "",
              rule: str = "smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT and sftHeld_change_hi < 0",
              extra: str = "") -> str:
    return f"""
name = "{name}"
question = "Does replay hold the ruler while sftHeld improves?"
seeds = [{", ".join(str(s) for s in seeds)}]

[base]
vars = {{ TATU_DATA = "{data}", TATU_SEED_CKPT = "{trunk}", TATU_DEVICE = "cpu", TATU_PRECISION = "fp32", TATU_MICRO_BATCH = 2, TATU_SEQ_LEN = 192, TATU_EVAL_RESAMPLES = 200, TATU_MEM_FLOOR_MB = 0, TATU_GEN_PROMPTS = 2, TATU_GEN_TOKENS = 4, SFT_GE = 2, MIX_STEPS_LIMIT = {steps}, EVAL_EVERY = 2, TATU_CKPT_EVERY = 1, TATU_LR = 3e-3{extra} }}

[axes]
REPLAY_N = [{", ".join(str(r) for r in replay)}]

[decision]
rule = "{rule}"
{tune}
"""



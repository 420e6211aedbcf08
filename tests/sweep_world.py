"""Plan files for sweep tests whose members are a few steps long, on the session's tiny trunk
(conftest.py's `tiny_trunk`: tests/tiny_world.py's data and a trunk pretrained through the daemon)."""
from __future__ import annotations

from pathlib import Path


def plan_text(name: str, data: Path, trunk: Path, seeds=(1, 2), replay=(0, 2), steps: int = 4, tune: str = "",
              rule: str = "smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT and sftHeld_change_hi < 0",
              extra: str = "", configs: str = "", baseline: str = "") -> str:
    """`configs`: a [configs] section's lines, replacing the REPLAY_N axis; `baseline`: [decision]'s."""
    axes = f"[configs]\n{configs}" if configs else f"[axes]\nREPLAY_N = [{', '.join(str(r) for r in replay)}]"
    return f"""
name = "{name}"
question = "Does replay hold the ruler while sftHeld improves?"
seeds = [{", ".join(str(s) for s in seeds)}]

[base]
vars = {{ TATU_DATA = "{data}", TATU_SEED_CKPT = "{trunk}", TATU_DEVICE = "cpu", TATU_PRECISION = "fp32", TATU_MICRO_BATCH = 2, TATU_SEQ_LEN = 192, TATU_EVAL_RESAMPLES = 200, TATU_MEM_FLOOR_MB = 0, TATU_GEN_PROMPTS = 2, TATU_GEN_TOKENS = 4, SFT_GE = 2, MIX_STEPS_LIMIT = {steps}, EVAL_EVERY = 2, TATU_CKPT_EVERY = 1, TATU_LR = 3e-3{extra} }}

{axes}

[decision]
rule = "{rule}"
{baseline}
{tune}
"""



"""TATU_TRAIN and the LoRA settings as sweep axes: members expand with their own train settings,
and a combination the daemon would refuse is refused by the plan, naming the member."""
from __future__ import annotations

import pytest

from tatu.exitcodes import BAD_CONFIG
from tatu.sweep.errors import SweepError
from tatu.sweep.plan import load_plan

PLAN = """
name = "methods"
seeds = [1, 2]
[base]
vars = {{ TATU_DATA = "data", TATU_SEED_CKPT = "seed", SFT_GE = 2, MIX_STEPS_LIMIT = 4 }}
[axes]
{axes}
[decision]
rule = "smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT"
"""


def plan_file(tmp_path, axes: str):
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(axes=axes), encoding="utf-8")
    return path


def test_a_train_axis_expands_into_members_with_their_train_settings(tmp_path):
    plan = load_plan(plan_file(tmp_path, 'TATU_TRAIN = ["all", "top:1", "lora"]\nREPLAY_N = [0, 2]'))
    members = plan.compare_members(tmp_path / "out", None)
    assert len(members) == 3 * 2 * 2
    trains = sorted({m.env["TATU_TRAIN"] for m in members})
    assert trains == ["all", "lora", "top:1"]
    assert {m.config_key for m in members if m.env["TATU_TRAIN"] == "top:1"} == {"traintop-1-replay-n0", "traintop-1-replay-n2"}
    assert plan.baseline == {"TATU_TRAIN": "all", "REPLAY_N": "0"}


def test_a_lora_rank_axis_with_lora_in_the_base(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(axes='TATU_LORA_RANK = [4, 8]\nREPLAY_N = [0]').replace(
        "MIX_STEPS_LIMIT = 4", 'MIX_STEPS_LIMIT = 4, TATU_TRAIN = "lora"'), encoding="utf-8")
    members = load_plan(path).compare_members(tmp_path / "out", None)
    assert sorted({m.env["TATU_LORA_RANK"] for m in members}) == ["4", "8"]


def test_a_lora_setting_crossed_with_full_training_is_refused_78_naming_the_member(tmp_path):
    with pytest.raises(SweepError) as refused:
        load_plan(plan_file(tmp_path, 'TATU_TRAIN = ["all", "lora"]\nTATU_LORA_RANK = [4]\nREPLAY_N = [0]'))
    assert refused.value.code == BAD_CONFIG
    assert "member train" in str(refused.value) and "TATU_LORA_RANK" in str(refused.value)

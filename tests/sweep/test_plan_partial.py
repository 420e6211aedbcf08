"""TATU_TRAIN, the LoRA settings and the retention terms as sweep axes: members expand with their own settings,
and a combination the daemon would refuse is refused by the plan, naming the member."""
from __future__ import annotations

import pytest

from tatu.exitcodes import BAD_CONFIG
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.load import load_plan

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


# --- the retention terms (TATU_ANCHOR*, TATU_EWC_*, TATU_DISTILL*: docs/forgetting.md) as axes ---

def test_an_anchor_weight_axis_expands_into_members_with_their_weight(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(axes='TATU_ANCHOR_WEIGHT = [1, 10, 100]\nREPLAY_N = [1]').replace(
        "MIX_STEPS_LIMIT = 4", 'MIX_STEPS_LIMIT = 4, TATU_ANCHOR = "ewc", TATU_EWC_BATCHES = 4'), encoding="utf-8")
    members = load_plan(path).compare_members(tmp_path / "out", None)
    assert len(members) == 3 * 2
    assert sorted({float(m.env["TATU_ANCHOR_WEIGHT"]) for m in members}) == [1.0, 10.0, 100.0]
    assert {m.env["TATU_ANCHOR"] for m in members} == {"ewc"}


def test_a_distill_axis_whose_members_lack_replay_is_refused_78_naming_the_member(tmp_path):
    with pytest.raises(SweepError) as refused:  # TATU_DISTILL_ON=replay (default) with REPLAY_N=0
        load_plan(plan_file(tmp_path, 'TATU_DISTILL_WEIGHT = [0.5]\nTATU_DISTILL = [1]\nREPLAY_N = [0, 2]'))
    assert refused.value.code == BAD_CONFIG and "REPLAY_N=0" in str(refused.value)

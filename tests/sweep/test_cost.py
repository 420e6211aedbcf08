"""sweep/cost.py counts a step's micro-batches as the run does: RunConfig's own parsing and defaults
(daemon/config.py), for a member's env and for the config an earlier run saved, whether the
variables are set or left to their defaults."""
from __future__ import annotations

import json

import pytest

from tatu.daemon.config import RunConfig, load_config
from tatu.sweep.cost import StepCost, measured_cost, member_seconds
from tatu.sweep.plan.load import Member

REQUIRED = {"TATU_DATA": "/nowhere/data", "TATU_SEED_CKPT": "/nowhere/seed"}  # never opened: only parsed
SET = {"SFT_GE": "3", "REPLAY_N": "2", "TATU_MICRO_BATCH": "4", "TATU_SEQ_LEN": "64", "MIX_STEPS_LIMIT": "10",
       "EVAL_EVERY": "5"}


def member(env: dict) -> Member:
    return Member("m-s1", "sweep.m-s1", "compare", "m", {}, 1, {**REQUIRED, **env})


def default(alias: str):
    (field,) = [f for f in RunConfig.model_fields.values() if f.alias == alias]
    return field.default


@pytest.mark.parametrize("env", [SET, {}], ids=["set", "omitted"])
def test_a_members_seconds_are_its_run_configs_steps_micro_batches_and_evals(env):
    cost = StepCost(seconds_per_slot=1e-6, eval_seconds=0.5, source="test")
    get = lambda name: int(env.get(name, default(name)))  # noqa: E731 -- by hand: the value or RunConfig's default
    steps = get("MIX_STEPS_LIMIT")
    slot = (get("SFT_GE") + get("REPLAY_N")) * get("TATU_MICRO_BATCH") * get("TATU_SEQ_LEN")
    evals = steps // get("EVAL_EVERY") + 2
    assert member_seconds(member(env), cost) == pytest.approx(steps * slot * 1e-6 + evals * 0.5)


def saved_run(root, name, config: dict, step_seconds: float):
    run = root / name
    (run / "final").mkdir(parents=True)
    (run / "final" / "meta.json").write_text(json.dumps({"config": config}))
    events = [{"event": "step", "step": i, "seconds": step_seconds} for i in (1, 2, 3)]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


@pytest.mark.parametrize("env", [SET, {}], ids=["set", "omitted"])
def test_the_measured_seconds_per_slot_divide_by_the_runs_own_micro_batches(tmp_path, env):
    """A saved config as the run wrote it (RunConfig.to_json, nulls and all), or one that leaves the
    variables out: either way the slot is what the run drew, SFT_GE + REPLAY_N micro-batches."""
    config = load_config({**REQUIRED, **env})[0]
    saved = config.to_json() if env else {**REQUIRED}  # an older meta.json: only what was set
    slot = (config.sft_ge + config.replay_n) * config.micro_batch * config.seq_len
    cost = measured_cost([saved_run(tmp_path, "r", saved, 2.0)])
    assert cost.seconds_per_slot == pytest.approx(2.0 / slot)

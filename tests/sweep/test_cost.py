"""sweep/run/cost.py counts a step's micro-batches as the run does: RunConfig's own parsing and defaults
(daemon/config.py), for a member's env and for the config an earlier run saved, whether the
variables are set or left to their defaults."""
from __future__ import annotations

import json

import pytest
from meta_only import write_meta

from tatu.daemon.config import RunConfig, load_config
from tatu.sweep.run.cost import StepCost, measured_cost, member_seconds
from tatu.sweep.plan.member import Member

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
    write_meta(run / "final", {"config": config})
    events = [{"event": "step", "step": i, "seconds": step_seconds} for i in (1, 2, 3)]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


@pytest.mark.parametrize("env", [SET, {}], ids=["set", "omitted"])
def test_the_measured_seconds_per_slot_divide_by_the_runs_own_micro_batches(tmp_path, env):
    """A saved config as the run wrote it (RunConfig.to_json, nulls and all), or one that leaves the
    variables out: either way the slot is what the run drew, SFT_GE + REPLAY_N micro-batches."""
    config = load_config({**REQUIRED, **env})[0]
    saved = config.to_json() if env else {**REQUIRED}  # an older checkpoint's config: only what was set
    slot = (config.sft_ge + config.replay_n) * config.micro_batch * config.seq_len
    cost = measured_cost([saved_run(tmp_path, "r", saved, 2.0)])
    assert cost.seconds_per_slot == pytest.approx(2.0 / slot)


# --- the estimate's model (issue 36: 1.7x short): threads, K at once, scheduling ----------------

def test_thread_factor_is_amdahls_law_and_matches_the_demos_measured_speedup():
    from tatu.sweep.run.cost import PARALLEL_FRACTION, thread_factor

    # by hand: p = 0.57, 1 thread (1 - p + p) = 1, 2 threads (1 - p + p / 2) = 0.715
    assert thread_factor(2, 1) == pytest.approx(1.0 / (1 - PARALLEL_FRACTION + PARALLEL_FRACTION / 2))
    assert thread_factor(2, 1) == pytest.approx(1.40, abs=0.01)  # the demo's trunk vs its members (cost.py)
    assert thread_factor(1, 1) == 1.0 and thread_factor(1, 2) == pytest.approx(1 / thread_factor(2, 1))


def test_schedule_seconds_puts_each_member_on_the_first_free_slot():
    from tatu.sweep.run.cost import schedule_seconds

    # the demo's shape: 3 short (aborting) and 3 long members, in plan order, K=2, by hand:
    # A=10 B=10; 3rd -> A=20; 4th -> B=10+30=40; 5th -> A=20+30=50; 6th -> B=40+30=70
    assert schedule_seconds([10, 10, 10, 30, 30, 30], 2) == 70  # sum / K would say 60
    assert schedule_seconds([10, 10, 10, 30, 30, 30], 1) == 120
    # A=30 B=30; A=60; B=40; B=50; B=60
    assert schedule_seconds([30, 30, 30, 10, 10, 10], 2) == 60
    assert schedule_seconds([], 2) == 0


def test_members_at_one_thread_two_at_once_cost_more_than_the_trunks_rate(tmp_path, monkeypatch):
    """The issue's case: the rate measured by a trunk at 2 threads, members at TATU_THREADS=1 two at
    once on 2 cores: each member's seconds are the trunk-rate seconds times thread_factor(2, 1)."""
    from tatu.sweep.run import cost as cost_module

    monkeypatch.setattr(cost_module, "cores", lambda: 2)
    config = load_config({**REQUIRED, **SET})[0]
    trunk = saved_run(tmp_path, "trunk", {**REQUIRED, **SET}, 2.0)  # TATU_THREADS unset: every core (2)
    measured = measured_cost([trunk], threads=1)
    assert measured.threads == 2
    one = member({**SET, "TATU_THREADS": "1"})
    config1 = load_config({**REQUIRED, **SET, "TATU_THREADS": "1"})[0]
    train = config1.mix_steps_limit * (config1.sft_ge + config1.replay_n) * config1.micro_batch * config1.seq_len
    evals = config1.mix_steps_limit // config1.eval_every + 2
    # by hand: the steps at the trunk's rate times Amdahl's factor, the evals as measured
    assert member_seconds(one, measured, k=2) == pytest.approx(
        train * measured.seconds_per_slot * cost_module.thread_factor(2, 1) + evals * measured.eval_seconds)
    assert member_seconds(one, measured, k=2) > member_seconds(one, measured)
    # a member that ran at its own threads is preferred over the trunk once there is one
    own = saved_run(tmp_path, "sweep.m-s1", {**REQUIRED, **SET, "TATU_THREADS": 1}, 5.0)
    measured = measured_cost([own, trunk], threads=1)
    slot = (config.sft_ge + config.replay_n) * config.micro_batch * config.seq_len
    assert measured.threads == 1 and measured.seconds_per_slot == pytest.approx(5.0 / slot)
    assert member_seconds(one, measured, k=2) == pytest.approx(member_seconds(one, measured))  # no scaling
    # unset threads, K=2 on 2 cores: each member gets one core
    assert cost_module.member_threads(load_config({**REQUIRED, **SET})[0], 2) == 1

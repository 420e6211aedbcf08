"""`[interpolate]` in a plan (fast: no member runs): the interpolated configurations it defines,
its place in the hash and the lock (absent without it, so such plans hash as before), and its
refusals, each 78 naming the file and the key."""
from __future__ import annotations

from pathlib import Path

import pytest

from run_records import config_result, rule_plan
from sweep_world import plan_text

from tatu.exitcodes import BAD_CONFIG
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.interpolate import InterpolateSpec
from tatu.sweep.plan.interpolated import interpolated_members
from tatu.sweep.plan.lock import reconcile
from tatu.sweep.plan.load import load_plan
from tatu.sweep.judge.records import ConfigResult

CONFIGS = "full-replay2 = { REPLAY_N = 2 }\nfull = {}\n"
RULE = "first config such that drift_hi < MIX_FORGET_LIMIT and sftHeld_change_hi < 0"
INTERPOLATE = '[interpolate]\nconfig = "full-replay2"\nalphas = [0.5, 0.25]\n'


def write_plan(directory: Path, interpolate: str = INTERPOLATE, configs: str = CONFIGS, **kw) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "wise.toml"
    kw.setdefault("rule", RULE)
    text = plan_text("wise", Path("data"), Path("runs/trunk/final"), configs=configs, **kw)
    path.write_text(text + "\n" + interpolate)
    return path


def test_each_alpha_is_a_configuration_of_the_parents_members(tmp_path):
    plan = load_plan(write_plan(tmp_path, seeds=(1, 2, 3)))
    assert (plan.interpolate.config, plan.interpolate.alphas) == ("full-replay2", (0.5, 0.25))
    assert plan.interpolate.keys() == ["full-replay2-a0.5", "full-replay2-a0.25"]
    lock, _ = reconcile(plan, tmp_path / "sweeps" / "wise")
    compare = lock.members_of("compare")
    assert len(compare) == 6  # no daemon member for an interpolated configuration
    found = interpolated_members(lock.plan.interpolate, compare)
    assert [m.name for m in found] == [f"full-replay2-a{a}-s{s}" for a in ("0.5", "0.25") for s in (1, 2, 3)]
    for m in found:
        assert m.parent.config_key == "full-replay2" and m.parent.seed == m.seed and m.env == m.parent.env
        assert m.values == {"config": m.config_key}
        assert m.directory(tmp_path / "sweeps" / "wise") == tmp_path / "sweeps" / "wise" / "interpolated" / m.name
    again = lock.plan
    assert again.interpolate == plan.interpolate and again.hash == plan.hash


def test_axis_plans_name_the_configuration_by_its_key(tmp_path):
    plan = load_plan(write_plan(tmp_path, configs="", rule="smallest REPLAY_N such that drift_hi < 0.5",
                                interpolate='[interpolate]\nconfig = "replay-n2"\nalphas = [0, 1]\n'))
    lock, _ = reconcile(plan, tmp_path / "sweeps" / "wise")
    found = interpolated_members(lock.plan.interpolate, lock.members_of("compare"))
    assert sorted({m.config_key for m in found}) == ["replay-n2-a0", "replay-n2-a1"]
    assert all(m.values == {"REPLAY_N": "2", "config": m.config_key} for m in found)


def test_a_plan_without_it_hashes_as_before_and_with_it_differently(tmp_path):
    without = load_plan(write_plan(tmp_path / "a", interpolate=""))
    assert without.interpolate is None and "interpolate" not in without.core()
    lock, _ = reconcile(without, tmp_path / "sweeps" / "a")
    assert lock.plan.interpolate is None and interpolated_members(lock.plan.interpolate, lock.members_of("compare")) == []
    with_it = load_plan(write_plan(tmp_path / "a", interpolate=INTERPOLATE))
    other_alpha = load_plan(write_plan(tmp_path / "a", interpolate=INTERPOLATE.replace("0.25", "0.75")))
    assert len({without.hash, with_it.hash, other_alpha.hash}) == 3
    assert len({without.portable_hash, with_it.portable_hash, other_alpha.portable_hash}) == 3
    # a locked plan that adds [interpolate] is another plan: refused, naming what changed
    with pytest.raises(SweepError) as err:
        reconcile(with_it, tmp_path / "sweeps" / "a")
    assert err.value.code == BAD_CONFIG and "changed: interpolate" in str(err.value)


@pytest.mark.parametrize("interpolate, where, message", [
    ('[interpolate]\nconfig = "full-replay6"\nalphas = [0.5]\n', "[interpolate] config",
     "'full-replay6' is not a configuration of the plan (full-replay2, full)"),
    ("[interpolate]\nalphas = [0.5]\n", "[interpolate] config", "None is not a configuration of the plan"),
    ('[interpolate]\nconfig = "full"\nalphas = [1.5]\n', "[interpolate] alphas", "1.5 is not a number in [0, 1]"),
    ('[interpolate]\nconfig = "full"\nalphas = [-0.1]\n', "[interpolate] alphas", "-0.1 is not a number in [0, 1]"),
    ('[interpolate]\nconfig = "full"\nalphas = ["0.5"]\n', "[interpolate] alphas", "'0.5' is not a number in [0, 1]"),
    ('[interpolate]\nconfig = "full"\nalphas = [true]\n', "[interpolate] alphas", "True is not a number in [0, 1]"),
    ('[interpolate]\nconfig = "full"\nalphas = [0.5, 0.25, 0.50]\n', "[interpolate] alphas", "repeated alphas in [0.5, 0.25, 0.5]"),
    ('[interpolate]\nconfig = "full"\nalphas = []\n', "[interpolate] alphas", "expected a non-empty list of numbers"),
    ('[interpolate]\nconfig = "full"\nalphas = [0.5]\nalpha = 0.5\n', "[interpolate] alpha", "unknown key"),
    ('[interpolate]\nconfig = "full"\nalphas = 0.5\n', "[interpolate] alphas", "expected a non-empty list of numbers"),
])
def test_refusals_name_the_file_and_the_key(tmp_path, interpolate, where, message):
    path = write_plan(tmp_path, interpolate=interpolate)
    with pytest.raises(SweepError) as err:
        load_plan(path)
    assert err.value.code == BAD_CONFIG
    assert str(err.value).startswith(f"{path}: {where}: {message}"), str(err.value)


def test_an_interpolated_key_may_not_shadow_a_configuration(tmp_path):
    path = write_plan(tmp_path, configs=CONFIGS + "full-a1 = { REPLAY_N = 1 }\n",
                      interpolate='[interpolate]\nconfig = "full"\nalphas = [0.5, 1]\n')
    with pytest.raises(SweepError) as err:
        load_plan(path)
    assert str(err.value) == f"{path}: [interpolate] alphas: full-a1 is already a configuration of the plan"


def test_the_shipped_forgetting_plan_interpolates_full_replay6():
    plan = load_plan(Path(__file__).resolve().parents[2] / "examples" / "sweep-forgetting.toml")
    assert plan.interpolate.keys() == ["full-replay6-a0.5"]
    assert {"l2sp", "ewc", "distill"} <= set(plan.configs)
    assert plan.configs["distill"]["REPLAY_N"] == plan.configs["full-replay6"]["REPLAY_N"]  # distill's own effect, paired


def _config(key: str, values: dict, drift_hi: float) -> ConfigResult:
    return config_result(key, values, (), {"drift": None, "sftHeld": None}, metrics={"drift_hi": drift_hi})


def test_the_rule_orders_interpolated_configurations_after_their_parents(tmp_path):
    from tatu.sweep.judge.verdict import decide

    axis = rule_plan("smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT", {"REPLAY_N": ["0", "2"]},
                     tmp_path / "p.toml", interpolate=InterpolateSpec("replay-n0", (0.5,)))
    configs = [_config("replay-n2", {"REPLAY_N": "2"}, 0.05),
               _config("replay-n0-a0.5", {"REPLAY_N": "0", "config": "replay-n0-a0.5"}, 0.05),
               _config("replay-n0", {"REPLAY_N": "0"}, 0.30)]
    verdict = decide(axis, configs)
    # an axis rule: its parent's value, judged right after the parent's own configuration
    assert [c.config for c in verdict.checks] == ["replay-n0", "replay-n0-a0.5", "replay-n2"]
    assert verdict.line.startswith("REPLAY_N=0 (replay-n0-a0.5): the smallest REPLAY_N such that")
    named = rule_plan("first config such that drift_hi < MIX_FORGET_LIMIT", {}, tmp_path / "p.toml", ("lora", "full"),
                      InterpolateSpec("full", (0.5, 0.25)))
    configs = [_config(k, {"config": k}, d) for k, d in (("full-a0.25", 0.01), ("full-a0.5", 0.01), ("full", 0.05), ("lora", 0.3))]
    verdict = decide(named, configs)
    # `first config`: every named configuration first, then the interpolated ones in the order of alphas
    assert [c.config for c in verdict.checks] == ["lora", "full", "full-a0.5", "full-a0.25"]
    assert verdict.chosen == "full"

"""`[design]` in a plan (fast: no member runs): the sequential design it pre-registers, its place in
the hash and the lock (absent without it), an edit after the lock refused, and its refusals, each 78
naming the file and the key."""
from __future__ import annotations

from pathlib import Path

import pytest

from sweep_world import plan_text

from tatu.evals.seeds.sequential import Design
from tatu.exitcodes import BAD_CONFIG
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.lock import reconcile
from tatu.sweep.plan.load import load_plan

CONFIGS = "full-replay2 = { REPLAY_N = 2 }\nfull = {}\n"
RULE = "first config such that drift_hi < MIX_FORGET_LIMIT and sftHeld_change_hi < 0"
DESIGN = '[design]\nsequential = "obf"\nmax_seeds = 4\n'


def write_plan(directory: Path, design: str = DESIGN, seeds=(1, 2, 3, 4), rule: str = RULE) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "seq.toml"
    path.write_text(plan_text("seq", Path("data"), Path("runs/trunk/final"), configs=CONFIGS, rule=rule, seeds=seeds)
                    + "\n" + design)
    return path


def test_the_design_is_locked_with_the_plan(tmp_path):
    plan = load_plan(write_plan(tmp_path))
    assert plan.design == Design("obf", 3, 4)
    without = load_plan(write_plan(tmp_path / "b", design=""))
    assert without.design is None and "design" not in without.core()
    assert without.portable_hash != plan.portable_hash  # the same plan file beside the same inputs, but for [design]
    lock, _ = reconcile(plan, tmp_path / "sweeps" / "seq")
    assert lock.plan.design.to_json() == {"sequential": "obf", "min_seeds": 3, "max_seeds": 4, "alpha": 0.05}
    again = lock.plan
    assert again.design == plan.design and again.hash == plan.hash


def test_an_edited_design_after_the_lock_is_a_changed_plan(tmp_path):
    reconcile(load_plan(write_plan(tmp_path)), tmp_path / "sweeps" / "seq")
    edited = load_plan(write_plan(tmp_path, design=DESIGN.replace('"obf"', '"pocock"')))
    with pytest.raises(SweepError) as err:
        reconcile(edited, tmp_path / "sweeps" / "seq")
    assert err.value.code == BAD_CONFIG and "changed: design" in str(err.value)


@pytest.mark.parametrize("design,where,says,rule", [
    ('[design]\nsequential = "obf"\n', "[design] max_seeds", "missing", RULE),
    ('[design]\nsequential = "asha"\nmax_seeds = 4\n', "[design] sequential", "unknown design", RULE),
    ('[design]\nsequential = "obf"\nmax_seeds = 4\nmin_seeds = 1\n', "[design] min_seeds", "needs 2 seeds", RULE),
    ('[design]\nsequential = "obf"\nmax_seeds = 4\nmin_seeds = 0\n', "[design] min_seeds", "needs 2 seeds", RULE),
    ('[design]\nsequential = "obf"\nmax_seeds = 4\nmin_seeds = -2\n', "[design] min_seeds", "needs 2 seeds", RULE),
    ('[design]\nsequential = "obf"\nmax_seeds = 6\n', "seeds", "at least max_seeds", RULE),
    ('[design]\nsequential = "obf"\nmax_seeds = 4\nlooks = 2\n', "[design] looks", "unknown key", RULE),
    (DESIGN, "[design] sequential", "at the common step", RULE + " at the common step"),
    (DESIGN, "[design] sequential", "no criterion a look can decide", "first config such that every_eval_drift_hi < 5%"),
    (DESIGN, "[design] sequential", "drift_lo: a look decides METRIC_hi < VALUE",
     "first config such that drift_hi < 5% and drift_lo < 1%"),
    (DESIGN + '[interpolate]\nconfig = "full-replay2"\nalphas = [0.5]\n', "[design] sequential", "not with [interpolate]",
     RULE),
])
def test_refusals_name_the_file_and_the_key(tmp_path, design, where, says, rule):
    path = write_plan(tmp_path, design=design, rule=rule)
    with pytest.raises(SweepError) as err:
        load_plan(path)
    assert err.value.code == BAD_CONFIG
    assert str(err.value).startswith(f"{path}: {where}: ") and says in str(err.value)


def test_the_shipped_sequential_example_asks_the_fixed_plans_question():
    """examples/sweep-forgetting-sequential.toml: examples/sweep-forgetting.toml's base, configurations,
    baseline and rule (less its interpolated configuration), 6 seeds, looked at from 3."""
    root = Path(__file__).resolve().parents[2] / "examples"
    sequential, fixed = load_plan(root / "sweep-forgetting-sequential.toml"), load_plan(root / "sweep-forgetting.toml")
    assert sequential.design == Design("obf", 3, 6) and sequential.seeds == [1, 2, 3, 4, 5, 6]
    assert (sequential.base_env, sequential.configs, sequential.baseline, sequential.rule) == (
        fixed.base_env, fixed.configs, fixed.baseline, fixed.rule)
    assert fixed.interpolate is not None and sequential.interpolate is None

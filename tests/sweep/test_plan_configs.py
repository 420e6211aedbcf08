"""Named configurations (`[configs]`): configurations that differ in several variables at once,
compared like an axis's values. They parse into members, hash stably (and leave plans without
them hashing as before), lock and reload, are refused with one line naming the file and the key,
and the rule's `first config` judges them in the plan's order (fast: no member runs)."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from run_records import config_result, rule_plan
from sweep_world import plan_text, stand_in_inputs

from tatu.exitcodes import BAD_CONFIG
from tatu.records import RelativeChange
from tatu.ops.cli import main as tatu
from tatu.sweep.judge.verdict import decide
from tatu.sweep.errors import SweepError
from tatu.sweep.judge.records import ConfigResult
from tatu.sweep.plan.lock import read_lock, reconcile
from tatu.sweep.plan.load import load_plan
from tatu.sweep.judge.records import ConfigStat

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIGS = ('lora-r4 = { TATU_TRAIN = "lora", TATU_LORA_RANK = 4 }\n'
           'top1 = { TATU_TRAIN = "top:1" }\n'
           "full-replay2 = { REPLAY_N = 2, TATU_LR = 1e-3 }\n"
           "full = {}\n")
# The same tables in TOML's other spelling.
SUB_TABLES = ('[configs.lora-r4]\nTATU_TRAIN = "lora"\nTATU_LORA_RANK = 4\n[configs.top1]\nTATU_TRAIN = "top:1"\n'
              "[configs.full-replay2]\nREPLAY_N = 2\nTATU_LR = 1e-3\n[configs.full]\n")
RULE = "first config such that drift_hi < MIX_FORGET_LIMIT and sftHeld_change_hi < 0"
BASELINE = 'baseline = { config = "full" }'


def write_plan(directory: Path, configs: str = CONFIGS, baseline: str = BASELINE, **kw) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "methods.toml"
    stand_in_inputs(directory / "data", directory / "runs" / "trunk" / "final")
    kw.setdefault("rule", RULE)
    path.write_text(plan_text("methods", Path("data"), Path("runs/trunk/final"), configs=configs, baseline=baseline, **kw))
    return path


def edited(directory: Path, edit, **kw) -> Path:
    path = write_plan(directory, **kw)
    path.write_text(edit(path.read_text()))
    return path


def test_configurations_that_differ_in_several_variables_become_members(tmp_path):
    plan = load_plan(write_plan(tmp_path, seeds=(1, 2, 3)))
    listed = plan.compare_members(tmp_path / "out", None)
    assert [m.name for m in listed][::3] == ["lora-r4-s1", "top1-s1", "full-replay2-s1", "full-s1"]
    assert len(listed) == 12 and len({m.run for m in listed}) == 12
    env = {m.config_key: m.env for m in listed if m.seed == 2}
    # each sets its own variables over the base, and only those
    assert (env["lora-r4"]["TATU_TRAIN"], env["lora-r4"]["TATU_LORA_RANK"]) == ("lora", "4") and "REPLAY_N" not in env["lora-r4"]
    assert env["top1"]["TATU_TRAIN"] == "top:1" and "TATU_LORA_RANK" not in env["top1"]
    assert (env["full-replay2"]["REPLAY_N"], env["full-replay2"]["TATU_LR"]) == ("2", "0.001")
    assert "TATU_TRAIN" not in env["full-replay2"]
    assert env["full"]["TATU_LR"] == "0.003" and "REPLAY_N" not in env["full"] and "TATU_TRAIN" not in env["full"]
    assert all(e["TATU_SEED"] == "2" and e["TATU_RUN"].startswith("methods.") for e in env.values())
    assert [m.values for m in listed][::3] == [{"config": "lora-r4"}, {"config": "top1"}, {"config": "full-replay2"},
                                              {"config": "full"}]
    assert plan.baseline == {"config": "full"} and plan.rule.choose == "first" and plan.rule.axis == "config"


def test_the_default_baseline_is_the_first_configuration(tmp_path):
    assert load_plan(write_plan(tmp_path, baseline="")).baseline == {"config": "lora-r4"}


def test_configurations_cross_the_axes(tmp_path):
    path = edited(tmp_path, lambda t: t.replace("[configs]", "[axes]\nSFT_GE = [2, 4]\n\n[configs]"),
                  configs='lora = { TATU_TRAIN = "lora", TATU_LORA_RANK = 2 }\nfull = {}\n',
                  baseline='baseline = { config = "full", SFT_GE = 2 }')
    plan = load_plan(path)
    listed = plan.compare_members(tmp_path, None)
    keys = list(dict.fromkeys(m.config_key for m in listed))
    assert keys == ["lora-sft-ge2", "lora-sft-ge4", "full-sft-ge2", "full-sft-ge4"]
    assert listed[2].values == {"config": "lora", "SFT_GE": "4"} and listed[2].env["SFT_GE"] == "4"
    assert plan.baseline == {"config": "full", "SFT_GE": "2"}
    # the rule may judge by the axis instead
    path.write_text(path.read_text().replace(RULE, "smallest SFT_GE such that drift_hi < 5%"))
    assert load_plan(path).rule.axis == "SFT_GE"


def test_the_hash_is_stable_and_follows_what_the_configurations_say(tmp_path):
    plan = load_plan(write_plan(tmp_path / "a"))
    elsewhere = load_plan(write_plan(tmp_path / "b" / "deeper"))
    # another checkout (the plan's paths are its directory's): the same portable hash, another lock hash
    assert plan.portable_hash == elsewhere.portable_hash and plan.hash != elsewhere.hash
    assert plan.portable_core()["configs"][2] == ["full-replay2", {"REPLAY_N": "2", "TATU_LR": "0.001"}]
    # TOML's other spelling of the same tables, and more seeds: the same plan
    assert load_plan(edited(tmp_path / "sub", lambda t: t.replace("[configs]\n" + CONFIGS, SUB_TABLES))).portable_hash == plan.portable_hash
    assert load_plan(write_plan(tmp_path / "seeds", seeds=(1, 2, 3))).portable_hash == plan.portable_hash
    # what a configuration sets, its name, their order (`first config` reads it) and the baseline are the plan
    edits = [lambda t: t.replace("TATU_LORA_RANK = 4", "TATU_LORA_RANK = 8"), lambda t: t.replace("top1 =", "top-1 ="),
             lambda t: t.replace("[configs]\n" + CONFIGS, SUB_TABLES.replace('[configs.top1]\nTATU_TRAIN = "top:1"\n', "")
                                 + '[configs.top1]\nTATU_TRAIN = "top:1"\n'),
             lambda t: t.replace('config = "full"', 'config = "top1"')]
    changed = [load_plan(edited(tmp_path / f"edit{i}", edit)) for i, edit in enumerate(edits)]
    assert [*changed[2].configs] == ["lora-r4", "full-replay2", "full", "top1"]
    hashes = {p.portable_hash for p in changed}
    assert len(hashes) == len(edits) and plan.portable_hash not in hashes
    # a plan without [configs] hashes what it always hashed: no "configs" key at all
    assert "configs" not in load_plan(EXAMPLES / "sweep-replay.toml").core()


def test_the_lock_keeps_the_configurations_in_order_and_a_restart_rebuilds_the_plan(tmp_path):
    plan = load_plan(write_plan(tmp_path))
    sweep_dir = tmp_path / "sweeps" / "methods"
    lock, what = reconcile(plan, sweep_dir)
    assert what == "locked" and list(read_lock(sweep_dir).plan.configs) == list(plan.configs)
    again = read_lock(sweep_dir).plan
    assert again.hash == plan.hash and again.configs == plan.configs
    assert [m.env for m in lock.members_of("compare")] == [m.env for m in again.compare_members(sweep_dir / "runs", None)]
    assert reconcile(plan, sweep_dir)[1] == "unchanged"
    changed = edited(tmp_path, lambda t: t.replace("TATU_LORA_RANK = 4", "TATU_LORA_RANK = 8"))
    with pytest.raises(SweepError, match=r"changed: configs\)"):
        reconcile(load_plan(changed), sweep_dir)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("TATU_LORA_RANK = 4", "TATU_LORA_RANKS = 4"), "[configs] lora-r4.TATU_LORA_RANKS: is not a run variable"),
    (lambda t: t.replace("full = {}", 'full = { TATU_RUN = "x" }'), "[configs] full.TATU_RUN: is not a run variable a configuration may set"),
    (lambda t: t.replace("full = {}", "full = { TATU_SEED = 3 }"), "[configs] full.TATU_SEED: is not a run variable a configuration may set"),
    (lambda t: t.replace("[configs]", "[axes]\nREPLAY_N = [0, 1]\n[configs]"), "[configs] full-replay2.REPLAY_N: is an axis of the plan"),
    # a repeated name is TOML's own error, one line with its line number
    (lambda t: t.replace("full = {}", "top1 = {}"), "not a TOML plan (Cannot overwrite a value (at line"),
    (lambda t: t.replace("full = {}", "full = { TATU_LR = 0.001, REPLAY_N = 2 }"), "[configs] full: runs the same configuration as full-replay2"),
    (lambda t: t.replace("full = {}", "full = { REPLAY_N = 0, TATU_LR = 1e-3, TATU_LORA_RANK = 4 }"), "[configs] full: member full-s1: TATU_LORA_RANK is set but TATU_TRAIN=all"),
    (lambda t: t.replace("full = {}", "plain = {}\nfull = { REPLAY_N = 0 }"), "[configs] full: runs the same configuration as plain"),
    (lambda t: t.replace("top1 =", "'top 1' ="), "[configs] top 1: a configuration's name is letters"),
    (lambda t: t.replace("top1 =", "tune-x ="), "not starting with 'tune'"),
    (lambda t: t.replace("full = {}", "full = 3"), "[configs] full: Input should be a valid dictionary"),
    (lambda t: t.replace("full = {}", "full = { REPLAY_N = [1] }"), "[configs] full.REPLAY_N: expected a number or a string, got list"),
    (lambda t: t.replace(CONFIGS, "").replace(BASELINE, ""), "[configs]: at least one configuration"),
    (lambda t: t.replace('config = "full"', 'config = "fuII"'), "[decision] baseline.config: fuII is not a configuration of [configs]"),
    (lambda t: t.replace("first config", "smallest config"), "'smallest config': write 'smallest|largest AXIS' or 'first config'"),
    (lambda t: t.replace("first config", "smallest TATU_TRAIN"), "TATU_TRAIN is not an axis of the plan (axes: none) or 'first config'"),
    (lambda t: t + "[tune]\nTATU_LR = [1e-3, 3e-3]\n", "[tune] TATU_LR: is set by the configuration full-replay2"),
])
def test_bad_configurations_are_refused_with_one_line_naming_file_and_key(tmp_path, edit, message):
    path = edited(tmp_path, edit)
    with pytest.raises(SweepError) as caught:
        load_plan(path)
    assert caught.value.code == BAD_CONFIG
    text = caught.value.message
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text, text


def test_first_config_without_configurations_is_refused(tmp_path):
    path = tmp_path / "axes.toml"
    path.write_text(plan_text("axes", Path("data"), Path("trunk"), rule=RULE))
    with pytest.raises(SweepError, match=r"'first config' chooses among \[configs\], and the plan has none"):
        load_plan(path)


def test_the_cli_prints_each_configuration_and_refuses_a_bad_one_78(tmp_path, capsys):
    path = write_plan(tmp_path)
    assert tatu(["sweep", "plan", str(path), "--sweeps", str(tmp_path / "sweeps")]) == 0
    out = capsys.readouterr().out
    assert "configuration lora-r4: TATU_LORA_RANK=4 TATU_TRAIN=lora\n" in out and "configuration full: (the base)\n" in out
    assert "baseline: config=full" in out and "members: 0 tune + 8 comparison: lora-r4-s1, lora-r4-s2, top1-s1" in out
    path.write_text(path.read_text().replace("TATU_LORA_RANK = 4", "TATU_LORA_RANKS = 4"))
    assert tatu(["sweep", "start", str(path), "--foreground", "--sweeps", str(tmp_path / "sweeps")]) == BAD_CONFIG
    assert "TATU_LORA_RANKS" in capsys.readouterr().err and not (tmp_path / "sweeps").exists()


def _config(name: str, drift_hi: float, change_hi: float) -> ConfigResult:
    drift = drift_hi - 0.02
    return config_result(
        name, {"config": name}, (), metrics={"drift": drift, "drift_hi": drift_hi, "sftHeld_change_hi": change_hi},
        stats={"drift": ConfigStat(
                RelativeChange(drift, drift - 0.02, drift_hi), log_mean=math.log1p(drift), se=0.0, seed_sd=0.02,
                seed_effect_sd=0.0, within_se=0.005, shared_line_se=0.0, interaction_se=0.0, df=None, n_seeds=3, mde=None,
                parts=None, per_seed={}, outliers=()), "sftHeld": None})


def test_first_config_judges_in_the_plans_order(tmp_path):
    plan = rule_plan(RULE, {}, tmp_path / "p.toml", ("lora-r4", "top1", "full-replay2", "full"))
    # given in another order, judged in the plan's: lora-r4 forgets, top1 learns nothing, full-replay2 passes
    configs = [_config("full", 0.30, -0.5), _config("full-replay2", 0.05, -0.4), _config("top1", 0.02, 0.01),
               _config("lora-r4", 0.15, -0.3)]
    verdict = decide(plan, configs)
    assert [c.config for c in verdict.checks] == ["lora-r4", "top1", "full-replay2", "full"]
    assert verdict.chosen == "full-replay2"
    assert verdict.line.startswith("config=full-replay2: the first config such that drift_hi < MIX_FORGET_LIMIT")
    assert [f.condition for f in verdict.checks[1].failed] == ["sftHeld_change_hi < 0"]
    configs[3] = _config("lora-r4", 0.08, -0.3)
    assert decide(plan, configs).chosen == "lora-r4"


def test_a_verdict_over_configurations_crossed_with_an_axis_names_the_member_key(tmp_path):
    # lora at SFT_GE=2 and at SFT_GE=4 share the value "lora" of the rule's axis: the key says which passed
    plan = rule_plan(RULE, {"SFT_GE": ["2", "4"]}, tmp_path / "p.toml", ("lora", "full"))
    configs = []
    for key, drift_hi, change_hi in (("full-sft-ge2", 0.30, -0.5), ("lora-sft-ge2", 0.15, -0.3),
                                     ("lora-sft-ge4", 0.05, -0.3), ("full-sft-ge4", 0.30, -0.5)):
        config = _config(key, drift_hi, change_hi)
        configs.append(dataclasses.replace(config, values={"config": key.split("-")[0], "SFT_GE": key[-1]}))
    verdict = decide(plan, configs)
    assert verdict.line.startswith("config=lora (lora-sft-ge4): the first config such that")
    assert [c.label for c in verdict.checks] == ["lora (lora-sft-ge2)", "lora (lora-sft-ge4)",
                                                     "full (full-sft-ge2)", "full (full-sft-ge4)"]
    # unshared values keep the plain value, as every shipped plan's verdict shows
    assert decide(rule_plan(RULE, {}, tmp_path / "p.toml", ("lora", "full")), configs[1:2] + configs[0:1]).checks[0].label == "lora"


FORGETTING_4 = {"lora-r8": {"TATU_TRAIN": "lora", "TATU_LORA_RANK": "8"}, "top1": {"TATU_TRAIN": "top:1"},
                "full-replay6": {"REPLAY_N": "6"}, "full": {}}
# issue 25's ways out, added to it (sweep-forgetting-4.toml is the plan as first run, kept)
SEED_TERMS = {"l2sp": {"TATU_ANCHOR": "l2sp", "TATU_ANCHOR_WEIGHT": "0.1"}, "ewc": {"TATU_ANCHOR": "ewc", "TATU_ANCHOR_WEIGHT": "0.4"},
              "distill": {"REPLAY_N": "6", "TATU_DISTILL": "1", "TATU_DISTILL_WEIGHT": "1", "TATU_DISTILL_T": "2"}}


@pytest.mark.parametrize("file, configs", [
    ("sweep-forgetting-4.toml", FORGETTING_4),
    ("sweep-forgetting.toml", {**{k: FORGETTING_4[k] for k in ("lora-r8", "top1")}, **{k: SEED_TERMS[k] for k in ("l2sp", "ewc")},
                               "full-replay6": FORGETTING_4["full-replay6"], "distill": SEED_TERMS["distill"], "full": {}}),
])
def test_the_shipped_forgetting_plan_compares_methods_against_full_training_without_replay(file, configs):
    plan = load_plan(EXAMPLES / file)
    listed = plan.compare_members(Path("/nonexistent"), None)
    assert plan.seeds == [1, 2, 3] and len(listed) == 3 * len(configs)
    assert plan.configs == configs and list(plan.configs) == list(configs)  # the order `first config` judges in
    assert plan.base_env["REPLAY_N"] == "0" and plan.baseline == {"config": "full"} and plan.rule.axis == "config"
    # the demo sweep's data, trunk, steps and shape (examples/sweep-replay.toml): the two tables read side by side
    assert {k: v for k, v in plan.base_env.items() if k != "REPLAY_N"} == load_plan(EXAMPLES / "sweep-replay.toml").base_env


def test_every_backend_hands_a_member_its_configurations_variables(tmp_path):
    """systemd and Ray start members from the env file text / env dict of backends.member_env; the
    foreground backend from the same dict: what they get parses back to the member's own config."""
    from tatu.daemon.config import load_config
    from tatu.envfile import env_file_text, parse_env_file
    from tatu.sweep.run.backends import member_env

    for m in load_plan(write_plan(tmp_path)).compare_members(tmp_path / "out", None):
        env_file = tmp_path / f"{m.run}.env"
        env_file.write_text(env_file_text(member_env(m, None)))
        assert parse_env_file(env_file) == m.env
        config = load_config(parse_env_file(env_file))[0]
        assert (config.to_json()["TATU_TRAIN"], config.to_json()["REPLAY_N"]) == {
            "lora-r4": ("lora", 0), "top1": ("top:1", 0), "full-replay2": ("all", 2), "full": ("all", 0)}[m.config_key]


def test_the_cost_estimate_counts_each_configurations_micro_batches(tmp_path):
    from tatu.sweep.run.cost import StepCost, member_seconds

    cost = StepCost(seconds_per_slot=1e-6, eval_seconds=0.5, source="test")
    by_config = {m.config_key: member_seconds(m, cost) for m in load_plan(write_plan(tmp_path)).compare_members(tmp_path, None)}
    # 4 steps of (SFT_GE 2 + REPLAY_N) micro-batches of 2 x 192 tokens, and 4 // 2 + 2 evals, by hand
    assert by_config["full"] == pytest.approx(4 * 2 * 2 * 192 * 1e-6 + 4 * 0.5)
    assert by_config["full-replay2"] == pytest.approx(4 * 4 * 2 * 192 * 1e-6 + 4 * 0.5)


def test_a_tune_stage_tunes_the_baseline_configuration_and_every_configuration_runs_the_tuned_value(tmp_path):
    configs = 'lora-r4 = { TATU_TRAIN = "lora", TATU_LORA_RANK = 4 }\nfull-replay2 = { REPLAY_N = 2 }\n'
    plan = load_plan(write_plan(tmp_path, configs=configs, baseline='baseline = { config = "lora-r4" }',
                                tune="[tune]\nTATU_LR = [1e-3, 3e-3]\nseeds = [1]\n"))
    tune = plan.tune_members(tmp_path)
    assert [m.name for m in tune] == ["tune-lr0.001-s1", "tune-lr0.003-s1"]
    assert all(m.env["TATU_TRAIN"] == "lora" and m.env["TATU_LORA_RANK"] == "4" for m in tune)
    assert tune[0].values == {"config": "lora-r4", "TATU_LR": "0.001"}
    compare = plan.compare_members(tmp_path, {"TATU_LR": "0.001"})
    assert {(m.config_key, m.env["TATU_LR"], m.env.get("TATU_TRAIN", "all")) for m in compare} == {
        ("lora-r4", "0.001", "lora"), ("full-replay2", "0.001", "all")}


def test_the_legend_shows_configurations_and_a_train_axis_but_leaves_other_tables_as_they_were():
    from tatu.sweep.report.tables import configs_legend

    replay = [config_result(f"replay-n{n}", {"REPLAY_N": str(n)}, (), None,
                            trainable="trainable 1.1M of 1.1M (100.0%): h.0-3") for n in (0, 2)]
    assert configs_legend(None, replay) == []  # the demo sweep's table has no legend
    axis = [config_result("trainall", {"TATU_TRAIN": "all"}, (), None, trainable="trainable 1.1M of 1.1M (100.0%): h.0-3"),
            config_result("trainlora", {"TATU_TRAIN": "lora"}, (), None)]
    rows = configs_legend(None, axis)[2].splitlines()
    assert [r.split() for r in rows[1:]] == [["trainall", "-", *axis[0].trainable.split()], ["trainlora", "-", "n/a"]]
    named = {"lora-r8": {"TATU_TRAIN": "lora", "TATU_LORA_RANK": "8"}, "full": {}}
    configs = [config_result("lora-r8", {"config": "lora-r8"}, (), None, trainable="lora r=8 alpha=16 on 16 modules: 65.5k trainable"),
               config_result("full", {"config": "full"}, (), None, trainable="trainable 1.1M of 1.1M (100.0%): h.0-3")]
    rows = configs_legend(named, configs)[2].splitlines()
    assert rows[1].split()[:3] == ["lora-r8", "TATU_LORA_RANK=8", "TATU_TRAIN=lora"] and rows[1].endswith("65.5k trainable")
    assert rows[2].split()[:4] == ["full", "(the", "base)", "trainable"]

"""`tatu sweep plan|start --env-file RUN.env --seeds N` before anything runs (fast): the plan it
generates is the env file's configuration at N seeds (its own TATU_SEED first) under the run's own
criteria, an ordinary plan file once written, locked as any plan is (more seeds continue it, another
env file conflicts); bad input is one line with its exit code and writes nothing; a one-configuration
verdict reads `holds|forgets|does not hold across N seeds`. End to end: test_env_seeds_run.py."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from run_records import config_result, member_result, rule_plan
from sweep_world import stand_in_inputs

from tatu.exitcodes import BAD_CONFIG, USAGE
from tatu.ops.cli import main as tatu
from tatu.sweep.judge.verdict import decide
from tatu.sweep.plan.env_seeds import derived_name, seeds_plan, write
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.lock import reconcile
from tatu.sweep.plan.load import Plan, load_plan
from tatu.sweep.judge.records import ConfigResult

RULE = ("first config such that drift_hi < MIX_FORGET_LIMIT and every_eval_drift_hi < MIX_FORGET_LIMIT "
        "and sftHeld_change_hi < 0")
CONDITIONS = RULE.split("such that ", 1)[1]
# What an operator's env file holds: relative paths (the current directory's), a comment, quotes,
# sweep-owned variables, and TATU_EVAL_LINES (every member keeps its per-line scores anyway).
ENV_TEXT = """# run 5
TATU_RUN=r5
TATU_OUT=runs
TATU_DATA=data
TATU_SEED_CKPT="trunk/final"
TATU_SEED=7
SFT_GE=2
REPLAY_N=1
MIX_FORGET_LIMIT=0.25
TATU_LR=3e-3
TATU_EVAL_LINES=0
TATU_DEVICE=cpu
"""


@pytest.fixture
def world(tmp_path, monkeypatch) -> Path:
    """tmp_path as the current directory, with data/, trunk/final/ and r5.env (ENV_TEXT)."""
    stand_in_inputs(tmp_path / "data", tmp_path / "trunk" / "final")
    (tmp_path / "r5.env").write_text(ENV_TEXT)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_members_are_the_env_files_configuration_at_n_seeds(world, capsys):
    generated = seeds_plan(Path("r5.env"), 3, Path("sweeps"))
    plan = generated.plan
    assert tatu(["sweep", "plan", "--env-file", "r5.env", "--seeds", "3"]) == 0
    assert f"generated from r5.env: `tatu sweep start` writes it to {generated.path}" in capsys.readouterr().out
    assert (plan.name, plan.seeds, list(plan.configs), plan.rule.text) == ("r5-seeds", [7, 8, 9], ["r5"], RULE)
    assert generated.path == world / "sweeps" / "r5-seeds" / "plan.toml" and not generated.path.exists()
    members = plan.compare_members(world / "sweeps" / "r5-seeds" / "runs", None)
    assert [m.name for m in members] == ["r5-s7", "r5-s8", "r5-s9"]
    # by hand: the env file's lines, its relative paths the current directory's, the sweep's own four
    written = dict(line.split("=", 1) for line in ENV_TEXT.splitlines() if line and not line.startswith("#"))
    written["TATU_SEED_CKPT"] = written["TATU_SEED_CKPT"].strip('"')
    for var in ("TATU_DATA", "TATU_SEED_CKPT"):
        written[var] = str((world / written[var]).resolve())
    for m in members:
        assert m.env == {**written, "TATU_SEED": str(m.seed), "TATU_RUN": f"r5-seeds.{m.name}",
                         "TATU_OUT": str(world / "sweeps" / "r5-seeds" / "runs"), "TATU_EVAL_LINES": "1"}


def test_the_rule_is_the_daemons_own_criteria_with_its_minimum_gain(world):
    (world / "g.env").write_text(ENV_TEXT.replace("TATU_RUN=r5", "TATU_RUN=g") + "TATU_VERDICT_MIN_GAIN=0.02\n")
    rule = seeds_plan(Path("g.env"), 2, Path("sweeps")).plan.rule
    assert rule.text == RULE.replace("< 0", "< -0.02")
    improve = rule.conditions[-1]
    assert (improve.metric, improve.threshold({})) == ("sftHeld_change_hi", -0.02)
    # the limit is the configuration's own MIX_FORGET_LIMIT, as the daemon's
    assert [c.threshold({"MIX_FORGET_LIMIT": 0.25}) for c in rule.conditions[:2]] == [0.25, 0.25]


def test_the_written_file_is_an_ordinary_plan_with_the_same_hash(world, capsys):
    generated = seeds_plan(Path("r5.env"), 2, Path("sweeps"))
    write(generated)
    again = load_plan(generated.path)
    assert (again.hash, again.portable_hash) == (generated.plan.hash, generated.plan.portable_hash)
    assert [m.env for m in again.compare_members(world, None)] == [m.env for m in generated.plan.compare_members(world, None)]
    assert tatu(["sweep", "plan", str(generated.path)]) == 0
    assert f"plan hash {generated.plan.portable_hash}" in capsys.readouterr().out
    # `plan --env-file` shows the same plan, and says it is the file already written
    assert tatu(["sweep", "plan", "--env-file", "r5.env", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert f"plan hash {generated.plan.portable_hash}" in out and f"generated from r5.env: as {generated.path}" in out


def test_a_locked_sweep_continues_grows_and_refuses_another_env_file(world, capsys):
    sweep_dir = world / "sweeps" / "r5-seeds"
    lock, what = reconcile(seeds_plan(Path("r5.env"), 3, Path("sweeps")).plan, sweep_dir)
    assert what == "locked" and lock.plan.seeds == [7, 8, 9]
    # the same file from elsewhere (an absolute path) is the same plan
    assert reconcile(seeds_plan(world / "r5.env", 3, Path("sweeps")).plan, sweep_dir)[1] == "unchanged"
    assert reconcile(seeds_plan(Path("r5.env"), 4, Path("sweeps")).plan, sweep_dir)[1] == "added seeds [10]"
    with pytest.raises(SweepError, match=r"seeds \[9, 10\] are locked") as fewer:
        reconcile(seeds_plan(Path("r5.env"), 2, Path("sweeps")).plan, sweep_dir)
    (world / "r5.env").write_text(ENV_TEXT.replace("REPLAY_N=1", "REPLAY_N=2"))
    with pytest.raises(SweepError, match=r"changed: base_env") as changed:
        reconcile(seeds_plan(Path("r5.env"), 4, Path("sweeps")).plan, sweep_dir)
    assert fewer.value.code == changed.value.code == BAD_CONFIG
    # through the command: refused before anything runs, and the locked sweep's plan file is left as it was
    (world / "r5.env").write_text(ENV_TEXT)
    write(seeds_plan(Path("r5.env"), 4, Path("sweeps")))
    kept = (sweep_dir / "plan.toml").read_text()
    (world / "r5.env").write_text(ENV_TEXT.replace("REPLAY_N=1", "REPLAY_N=2"))
    assert tatu(["sweep", "start", "--env-file", "r5.env", "--seeds", "4", "--foreground"]) == BAD_CONFIG
    assert "changed: base_env" in capsys.readouterr().err
    assert (sweep_dir / "plan.toml").read_text() == kept and not (sweep_dir / "runs").exists()


def _sha6(run: str) -> str:
    return hashlib.sha1(run.encode()).hexdigest()[:6]


# (TATU_RUN, the configuration, the sweep): the run's own name where it is a plain one; else '.'
# and the like become '-', 'tune...' gets 'r-' in front, and a name cut to fit ends in '-' and 6 hex
# of sha1(TATU_RUN).
DERIVED = [
    ("r5", "r5", "r5-seeds"),
    ("demo-replay.replay-n6-s1", "demo-replay-replay-n6-s1", f"demo-replay-{_sha6('demo-replay.replay-n6-s1')}-seeds"),
    ("tune5", "r-tune5", "r-tune5-seeds"),
    ("a-run-name-of-twenty-one", "a-run-name-of-twenty-one", f"a-run-name-{_sha6('a-run-name-of-twenty-one')}-seeds"),
    ("x" * 64, "x" * 17 + f"-{_sha6('x' * 64)}", "x" * 11 + f"-{_sha6('x' * 64)}-seeds"),
]


@pytest.mark.parametrize("run, config, sweep", DERIVED)
def test_a_run_name_that_is_not_a_configuration_name_is_made_one_and_said(world, capsys, run, config, sweep):
    (world / "r5.env").write_text(ENV_TEXT.replace("TATU_RUN=r5", f"TATU_RUN={run}"))
    generated = seeds_plan(Path("r5.env"), 2, Path("sweeps"))
    assert (generated.plan.name, list(generated.plan.configs)) == (sweep, [config])
    assert [m.name for m in generated.plan.compare_members(world, None)] == [f"{config}-s7", f"{config}-s8"]
    assert tatu(["sweep", "plan", "--env-file", "r5.env", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if line.startswith(f"TATU_RUN={run} (r5.env:2)")]
    if (config, sweep) == (run, f"{run}-seeds"):
        assert said == [] and generated.derived is None
    else:
        assert said == [generated.derived] and said[0].endswith(
            f"the configuration is {config}, the sweep {sweep}" if config != run else f"the sweep is {sweep}")
    # the same run, the same names (a second `start` continues the sweep it locked)
    assert seeds_plan(Path("r5.env"), 2, Path("sweeps")).plan.hash == generated.plan.hash


def test_two_long_runs_that_share_a_beginning_get_two_names():
    one, two = "demo-replay.replay-n6-s12", "demo-replay.replay-n6-s13"
    assert derived_name(one) != derived_name(two) and derived_name(one, 18) != derived_name(two, 18)
    for name in (derived_name(one), derived_name(two), derived_name(".tune" + "é" * 40)):
        assert len(name) <= 24 and name[0].isalnum() and set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-_r"), name
        assert not name.lower().startswith("tune")


@pytest.mark.parametrize("edit, args, code, message", [
    (None, ["--env-file", "nowhere.env", "--seeds", "3"], BAD_CONFIG, "nowhere.env: cannot read"),
    (lambda t: t + "REPLAY_M=2\n", ["--seeds", "3"], BAD_CONFIG, "r5.env:13: unknown variable REPLAY_M (did you mean REPLAY_N?)"),
    (lambda t: t.replace("TATU_LR=3e-3", "TATU_LR=fast"), ["--seeds", "3"], BAD_CONFIG, "r5.env:10: TATU_LR=fast: not a number (default: 0.0003)"),
    (lambda t: t.replace("MIX_FORGET_LIMIT=0.25", "MIX_FORGET_LIMIT=25"), ["--seeds", "3"], BAD_CONFIG, "r5.env:9: MIX_FORGET_LIMIT=25: a fraction (0.05 = 5%) is at most 1: did you mean 0.25?"),
    (lambda t: t + "OMP_NUM_THREADS=1\n", ["--seeds", "3"], BAD_CONFIG, "r5.env:13: OMP_NUM_THREADS is not a run variable"),
    (lambda t: t.replace("TATU_DATA=data", "TATU_DATA=missing"), ["--seeds", "3"], BAD_CONFIG, "r5.env:4: TATU_DATA=missing: "),
    (None, ["--seeds", "1"], USAGE, "--seeds 1: at least 2"),
    (None, [], USAGE, "--env-file: --seeds N is required"),
    (None, ["--name", "bad name", "--seeds", "2"], USAGE, "--name: letters, digits"),
])
@pytest.mark.parametrize("action", ["plan", "start"])
def test_bad_input_is_one_line_with_its_exit_code_and_writes_nothing(world, capsys, action, edit, args, code, message):
    if edit:
        (world / "r5.env").write_text(edit(ENV_TEXT))
    if "--env-file" not in args:
        args = ["--env-file", "r5.env", *args]
    assert tatu(["sweep", action, *args, "--foreground"][: None if action == "start" else -1]) == code
    err = capsys.readouterr().err
    assert err.startswith("tatu sweep: ") and message in err and len(err.splitlines()) == 1, err
    assert not (world / "sweeps").exists()


@pytest.mark.parametrize("action", ["plan", "start"])
def test_a_plan_file_and_an_env_file_are_one_or_the_other(world, capsys, action):
    plan = world / "p.toml"
    for args, says in ((["--env-file", "r5.env", "--seeds", "2", str(plan)], "give a plan file or --env-file RUN.env --seeds N, not both"),
                       ([], "give a plan file or --env-file RUN.env --seeds N"),
                       ([str(plan), "--seeds", "3"], "--seeds go with --env-file")):
        assert tatu(["sweep", action, *args]) == USAGE
        assert says in capsys.readouterr().err
    assert not (world / "sweeps").exists()


def _one_config(metrics: dict, seeds: int = 3) -> tuple[Plan, list[ConfigResult]]:
    lock = rule_plan(RULE, {}, "/p.toml", ("r5",))
    results = [member_result("r5", s, {}, {}) for s in range(1, seeds + 1)]
    results.append(member_result("r5", seeds + 1, state="failed"))  # one member without results
    return lock, [config_result("r5", {"config": "r5"}, results, None, metrics=metrics)]


@pytest.mark.parametrize("metrics, line", [
    ({"drift_hi": 0.05, "every_eval_drift_hi": 0.08, "sftHeld_change_hi": -0.01},
     "r5 holds across 3 seeds: drift_hi < MIX_FORGET_LIMIT and every_eval_drift_hi < MIX_FORGET_LIMIT and sftHeld_change_hi < 0"),
    ({"drift_hi": 0.05, "every_eval_drift_hi": 0.12, "sftHeld_change_hi": -0.01}, f"r5 forgets across 3 seeds (the rule: {CONDITIONS})"),
    ({"drift_hi": 0.05, "every_eval_drift_hi": 0.08, "sftHeld_change_hi": 0.01}, f"r5 does not hold across 3 seeds (the rule: {CONDITIONS})"),
    ({"drift_hi": 0.05, "every_eval_drift_hi": 0.08}, "r5 is not judged across 3 seeds: no value for sftHeld_change_hi"),
])
def test_one_configurations_verdict_says_holds_or_forgets_across_its_seeds(metrics, line):
    verdict = decide(*_one_config(metrics))
    assert verdict.line.startswith(line)
    assert verdict.chosen == ("r5" if "holds" in line else None)

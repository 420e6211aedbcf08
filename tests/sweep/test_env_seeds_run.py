"""`tatu sweep start --env-file RUN.env --seeds 2 --foreground` end to end on the tiny trunk: the
members ran the env file's configuration (read back from their checkpoints) at the run's own seed
and the next, the locked rule is the run's criteria with its own MIX_FORGET_LIMIT, and the verdict
is the one a hand-written plan of the same design gives when it runs (the plan below)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweep_world import run_through
from tiny_world import clean_environ

from tatu.daemon.config import load_config
from tatu.envfile import parse_env_file
from tatu.sweep.judge.analysis import analyze
from tatu.sweep.plan.lock import read_lock

pytestmark = pytest.mark.slow

RULE = ("first config such that drift_hi < MIX_FORGET_LIMIT and every_eval_drift_hi < MIX_FORGET_LIMIT "
        "and sftHeld_change_hi < 0")
# The run: a few steps on the tiny trunk; MIX_FORGET_LIMIT not the default, so the rule must take the file's.
RUN_VARS = {"TATU_DEVICE": "cpu", "TATU_PRECISION": "fp32", "TATU_MICRO_BATCH": "2", "TATU_SEQ_LEN": "192",
            "TATU_EVAL_RESAMPLES": "200", "TATU_MEM_FLOOR_MB": "0", "TATU_GEN_PROMPTS": "2", "TATU_GEN_TOKENS": "4",
            "SFT_GE": "2", "REPLAY_N": "1", "MIX_STEPS_LIMIT": "4", "EVAL_EVERY": "2", "TATU_CKPT_EVERY": "2",
            "TATU_LR": "3e-3", "MIX_FORGET_LIMIT": "0.3"}
SWEEP_SET = ("TATU_SEED", "TATU_RUN", "TATU_OUT", "TATU_EVAL_LINES")


def _tatu(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tatu.ops.cli", "sweep", *args], cwd=root, env=clean_environ(),
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory, tiny_trunk):
    """(root, the env file's variables with its paths resolved, the generated sweep dir, the hand plan's)."""
    root = tmp_path_factory.mktemp("envseeds")
    # relative paths, as an operator's env file has them: the current directory's
    env = {"TATU_RUN": "r5", "TATU_OUT": "runs", "TATU_SEED": "5",
           "TATU_DATA": os.path.relpath(tiny_trunk["data"], root), "TATU_SEED_CKPT": os.path.relpath(tiny_trunk["trunk"], root),
           **RUN_VARS}
    (root / "r5.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    shown = _tatu(root, "plan", "--env-file", "r5.env", "--seeds", "2")
    assert shown.returncode == 0 and "members: 0 tune + 2 comparison: r5-s5, r5-s6" in shown.stdout, shown.stdout + shown.stderr
    ran = _tatu(root, "start", "--env-file", "r5.env", "--seeds", "2", "--foreground", "-K", "2", "--poll", "0.3")
    assert ran.returncode == 0 and "sweep finished: 2/2 done" in ran.stdout, ran.stdout + ran.stderr
    resolved = {**env, "TATU_DATA": str(tiny_trunk["data"].resolve()), "TATU_SEED_CKPT": str(tiny_trunk["trunk"].resolve())}
    # The same design written by hand: the run's variables, one configuration, its seeds, its criteria.
    hand_vars = ", ".join(f'{k} = "{v}"' for k, v in resolved.items() if k not in SWEEP_SET)
    hand = root / "hand.toml"
    hand.write_text(f'name = "hand"\nquestion = "r5 over seeds, written by hand"\nseeds = [5, 6]\n'
                    f"[base]\nvars = {{ {hand_vars} }}\n[configs]\nr5 = {{}}\n[decision]\nrule = \"{RULE}\"\n")
    run_through(hand, root / "hand-sweeps", "2/2 done")
    return root, resolved, root / "sweeps" / "r5-seeds", root / "hand-sweeps" / "hand"


def test_the_members_ran_the_env_files_configuration_at_its_seed_and_the_next(sweeps):
    _, resolved, generated, _ = sweeps
    expected = load_config(resolved)[0].to_json()  # what the run itself would run, by the daemon's own reading
    seeds = []
    for m in read_lock(generated).members_of("compare"):
        ran = json.loads((m.run_dir / "final" / "meta.json").read_text())["config"]
        assert {k: v for k, v in ran.items() if k not in SWEEP_SET} == {k: v for k, v in expected.items() if k not in SWEEP_SET}
        assert (ran["TATU_RUN"], ran["TATU_EVAL_LINES"]) == (f"r5-seeds.r5-s{ran['TATU_SEED']}", True)
        seeds.append(ran["TATU_SEED"])
    assert seeds == [5, 6]


def test_the_rule_is_the_runs_criteria_and_the_verdict_is_the_hand_written_plans(sweeps):
    root, _, generated, hand = sweeps
    lock = read_lock(generated)
    assert lock.plan.rule.text == read_lock(hand).plan.rule.text == RULE
    ours, theirs = analyze(generated), analyze(hand)
    config = ours.compare.configs[0]
    assert config.effective["MIX_FORGET_LIMIT"] == 0.3
    verdict, expected = ours.verdict, theirs.verdict
    assert verdict.complete and verdict.line == expected.line and verdict.chosen == expected.chosen
    assert verdict.checks == expected.checks and verdict.would_change == expected.would_change
    # the line says what the one configuration did across its seeds, by the rule's conditions
    metrics = config.metrics
    holds = metrics["drift_hi"] < 0.3 and metrics["every_eval_drift_hi"] < 0.3 and metrics["sftHeld_change_hi"] < 0
    outcome = "holds" if holds else ("forgets" if max(metrics["drift_hi"], metrics["every_eval_drift_hi"]) >= 0.3 else "does not hold")
    assert verdict.line.startswith(f"r5 {outcome} across 2 seeds")
    # the generated plan is an ordinary plan file: its hash, and the report, as for any other
    shown = _tatu(root, "plan", str(generated / "plan.toml"))
    assert f"plan hash {lock.plan_portable_hash}" in shown.stdout, shown.stdout + shown.stderr
    report = _tatu(root, "report", "r5-seeds")
    assert report.returncode == 0 and f"VERDICT (locked rule): {verdict.line}" in report.stdout, report.stdout + report.stderr


def test_the_same_command_again_continues_the_finished_sweep(sweeps):
    root, _, generated, _ = sweeps
    before = (generated / "plan.lock.json").read_text()
    again = _tatu(root, "start", "--env-file", "r5.env", "--seeds", "2", "--foreground")
    assert again.returncode == 0 and "plan unchanged" in again.stdout and "already finished" in again.stdout, again.stdout
    assert (generated / "plan.lock.json").read_text() == before

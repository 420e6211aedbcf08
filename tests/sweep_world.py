"""Plan files for sweep tests whose members are a few steps long, on the session's tiny trunk
(conftest.py's `tiny_trunk`: tests/tiny_world.py's data and a trunk pretrained through the daemon)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_world import clean_environ


# What the demo's data holds, as far as a plan's check reads it: the sets its rule names (sftHeld with
# answers) and the text channels its members replay.
STAND_IN_EVALS = {"sftHeld": {"answers": True}, "ptVal": {}, "enRuler": {}, "ptFaq": {}}
STAND_IN_CHANNELS = {"pretrain": {"kind": "text"}, "replay": {"kind": "text"}, "ptReplay": {"kind": "text"},
                     "sft": {"kind": "sft"}}


def stand_in_inputs(data: Path, *checkpoints: Path) -> None:
    """A data dir and checkpoint dirs as `tatu sweep plan` checks them before anything runs (the
    manifest's format, its eval sets and channels, the checkpoints' existence), for tests that plan
    without training: empty otherwise, so a member started on them still fails at its first read."""
    from tatu.data.manifest import FORMAT

    data.mkdir(parents=True, exist_ok=True)
    (data / "manifest.json").write_text(json.dumps({"format": FORMAT, "evals": STAND_IN_EVALS,
                                                    "channels": STAND_IN_CHANNELS}))
    for checkpoint in checkpoints:
        checkpoint.mkdir(parents=True, exist_ok=True)


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


def steps_plan_text(name: str, data: Path, trunk: Path, rule: str) -> str:
    """Two configurations that end at different steps (the axis MIX_STEPS_LIMIT = [4, 6], the way an
    aborted member's end and a finished one's differ), two seeds each; a cosine schedule (to
    MIX_STEPS_LIMIT), so the two train differently before step 4 too."""
    text = plan_text(name, data, trunk, seeds=(1, 2), replay=(1,), rule=rule, extra=', TATU_SCHEDULE = "cosine"')
    return text.replace("MIX_STEPS_LIMIT = 4, ", "").replace("[axes]\nREPLAY_N = [1]", "[axes]\nMIX_STEPS_LIMIT = [4, 6]")


def start_foreground(plan: Path, sweeps: Path, *extra: str, wait: bool = True):
    """`tatu sweep start PLAN --foreground -K 2` under `sweeps`: its CompletedProcess, or with
    wait=False the running coordinator (stdout and stderr together)."""
    cmd = [sys.executable, "-m", "tatu.ops.cli", "sweep", "start", str(plan), "--foreground", "-K", "2",
           "--poll", "0.3", "--sweeps", str(sweeps), *extra]
    if wait:
        return subprocess.run(cmd, env=clean_environ(), capture_output=True, text=True, timeout=900)
    return subprocess.Popen(cmd, env=clean_environ(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_through(plan: Path, sweeps: Path, finished: str | None = None) -> str:
    """A foreground sweep to its end: exit 0 (and its `sweep finished: FINISHED` line) asserted; its stdout."""
    proc = start_foreground(plan, sweeps)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert finished is None or f"sweep finished: {finished}" in proc.stdout, proc.stdout
    return proc.stdout


def plan_world(tmp_path_factory, tiny_trunk: dict, name: str, text: str | None = None, **plan: object) -> tuple[Path, Path]:
    """(a fresh root, ROOT/NAME.toml): plan_text(NAME, ...) on the session's tiny trunk, or `text`."""
    root = tmp_path_factory.mktemp(f"{name}-world")
    path = root / f"{name}.toml"
    path.write_text(text if text is not None else plan_text(name, tiny_trunk["data"], tiny_trunk["trunk"], **plan))
    return root, path


# A sequential plan every backend's kill -9 test runs (foreground, Ray, systemd): `first config`, one
# look at 3 seeds (min_seeds = max_seeds = 3: the fixed design's CI, logged as a look), a limit every
# configuration meets, so the first configuration passes and the second never runs.
SEQUENTIAL_CONFIGS = "first = { REPLAY_N = 2 }\nsecond = {}\n"
SEQUENTIAL_RULE = "first config such that drift_hi < 50%"
SEQUENTIAL_DESIGN = '\n[design]\nsequential = "obf"\nmin_seeds = 3\nmax_seeds = 3\n'


def sequential_plan_world(tmp_path_factory, tiny_trunk: dict, name: str, extra: str = "") -> tuple[Path, Path]:
    """plan_world with the sequential plan above, seeds 1-3."""
    root, plan = plan_world(tmp_path_factory, tiny_trunk, name, configs=SEQUENTIAL_CONFIGS, rule=SEQUENTIAL_RULE,
                            seeds=(1, 2, 3), extra=extra)
    plan.write_text(plan.read_text() + SEQUENTIAL_DESIGN)
    return root, plan


def assert_every_p_agrees_with_its_ci(report) -> int:
    """Walk report.json: every paired comparison (a dict with diff, lo, hi and p_value) has
    p < 0.05 exactly when its 95% CI excludes 0, and a Holm-adjusted p no smaller than its own.
    Returns how many it checked (a caller asserts there were some)."""
    checked = 0
    if isinstance(report, dict):
        if {"diff", "lo", "hi", "p_value"} <= report.keys():
            excludes = report["lo"] > 0 or report["hi"] < 0
            assert (report["p_value"] < 0.05) == excludes, report
            if report.get("p_holm") is not None:
                assert report["p_holm"] >= report["p_value"], report
            checked += 1
        children = report.values()
    elif isinstance(report, list):
        children = report
    else:
        return 0
    return checked + sum(assert_every_p_agrees_with_its_ci(child) for child in children)


def assert_paired_p_agrees_with_ci(paired, diffs: list[float]) -> None:
    """The paired difference (a sweep/judge/records.py PairedDiff) is the mean of the per-seed
    differences; its p is the two-sided t at the CI's own SE (its half-width over t_.975 at its df:
    scipy here) and df, so p < 0.05 exactly when the CI excludes 0."""
    from scipy import stats as sp

    diff = paired.change
    assert diff.value == pytest.approx(sum(diffs) / len(diffs), abs=1e-12)
    df = paired.df if paired.df is not None else math.inf
    se = (diff.hi - diff.lo) / 2 / sp.t.ppf(0.975, df)
    if math.isclose(diff.hi - diff.value, diff.value - diff.lo, rel_tol=1e-9):
        # a symmetric CI (no skew correction moved a bound: evals/seeds/skew.py): p is the plain t's
        assert paired.p_value == pytest.approx(2 * sp.t.sf(abs(diff.value) / se, df), rel=1e-6, abs=1e-12)
    assert (paired.p_value < 0.05) == (diff.lo > 0 or diff.hi < 0)


def report_numbers(sweep_dir: Path) -> str:
    """A sweep's report as report.json writes it, less each configuration's effective config (which
    holds the sweep's own paths: TATU_OUT, TATU_RUN dirs): two sweeps of one plan compare by it."""
    from tatu.sweep.judge.analysis import analyze
    data = analyze(sweep_dir).to_json()
    for stage in (data["tune"], data["compare"]):
        for config in (stage or {}).get("configs", []):  # a plan without [tune] has no tune stage
            config.pop("effective")
    return json.dumps(data, sort_keys=True)

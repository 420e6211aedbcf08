"""The sweep's plan, lock, member states and locked rule, without running members (fast)."""
from __future__ import annotations

import dataclasses
import json
import re
import math
from pathlib import Path

import pytest

from run_records import config_result, eval_record, member_result, rejudged, rule_plan
from run_records import verdict as finished_verdict
from sweep_world import plan_text, stand_in_inputs

from tatu.evals.seeds.power import CrossedParts
from tatu.exitcodes import BAD_CONFIG
from tatu.ops.cli import main as tatu
from tatu.sweep.judge.verdict import decide
from tatu.sweep.run.backends import UnitState
from tatu.sweep.errors import SweepError
from tatu.sweep.run.members import forecast_cell, member_status, summary
from tatu.sweep.plan.lock import lock_path, read_lock, reconcile
from tatu.sweep.plan.load import config_label, load_plan
from tatu.records import RelativeChange
from tatu.sweep.judge.records import ConfigStat

TUNE = '[tune]\nTATU_LR = [1e-3, 3e-3]\nseeds = [1]\n'


def write_plan(tmp_path: Path, name="dose", **kw) -> Path:
    path = tmp_path / f"{name}.toml"
    stand_in_inputs(tmp_path / "data", tmp_path / "runs" / "trunk" / "final")
    path.write_text(plan_text(name, Path("data"), Path("runs/trunk/final"), **kw))
    return path


def test_plan_members_names_configs_and_paths(tmp_path):
    plan = load_plan(write_plan(tmp_path, seeds=(1, 2, 3), replay=(0, 2, 6)))
    listed = plan.compare_members(tmp_path / "out", None)
    assert [m.name for m in listed][:4] == ["replay-n0-s1", "replay-n0-s2", "replay-n0-s3", "replay-n2-s1"]
    assert len(listed) == 9 and len({m.run for m in listed}) == 9
    m = listed[-1]
    assert m.run == "dose.replay-n6-s3" and m.env["REPLAY_N"] == "6" and m.env["TATU_SEED"] == "3"
    assert m.env["TATU_RUN"] == m.run and m.env["TATU_OUT"] == str(tmp_path / "out")
    # Relative paths are the plan file's directory's, made absolute.
    assert m.env["TATU_DATA"] == str((tmp_path / "data").resolve())
    assert m.env["TATU_SEED_CKPT"] == str((tmp_path / "runs/trunk/final").resolve())
    assert plan.baseline == {"REPLAY_N": "0"}
    assert config_label({"TATU_LR": "0.001", "REPLAY_N": "2"}) == "lr0.001-replay-n2"


def test_plan_hash_ignores_seeds_but_not_knobs(tmp_path):
    a = load_plan(write_plan(tmp_path, seeds=(1, 2)))
    b = load_plan(write_plan(tmp_path, seeds=(1, 2, 3)))
    c = load_plan(write_plan(tmp_path, replay=(0, 4)))
    assert a.hash == b.hash != c.hash


def test_the_portable_hash_is_the_same_on_every_checkout_the_lock_hash_is_not(tmp_path):
    # Two checkouts of the same files: the plan's paths are relative to its directory, so they
    # resolve to other absolute paths; a plan that moves its data elsewhere is another plan.
    text = plan_text("dose", Path("../demo/data"), Path("../demo/runs/trunk/final"))
    plans = []
    for checkout in ("a", "b/deeper"):
        path = tmp_path / checkout / "examples" / "dose.toml"
        path.parent.mkdir(parents=True)
        path.write_text(text)
        plans.append(load_plan(path))
    a, b = plans
    assert a.hash != b.hash and a.portable_hash == b.portable_hash
    assert a.portable_core()["base_env"]["TATU_DATA"] == "../demo/data"
    moved = tmp_path / "c" / "examples" / "dose.toml"
    moved.parent.mkdir(parents=True)
    moved.write_text(text.replace("../demo/data", "../other/data"))
    assert load_plan(moved).portable_hash != a.portable_hash
    # The lock keeps both; the report's header names the portable one.
    lock, _ = reconcile(a, tmp_path / "sweeps" / "dose")
    assert (lock.plan_hash, lock.plan_portable_hash) == (a.hash, a.portable_hash)


@pytest.mark.parametrize("doc, sweep, plan", [
    ("sweeps.md", "replay-dose", "sweep-replay.toml"),
    # the table measured with the plan's first version (4 configurations), kept as it was run
    ("partial-training.md", "forgetting", "sweep-forgetting-4.toml"),
    ("forgetting.md", "forgetting", "sweep-forgetting.toml"),  # every way out
])
def test_the_demo_sweep_table_in_the_docs_is_from_the_shipped_plan(doc, sweep, plan):
    root = Path(__file__).resolve().parents[2]
    documented = re.findall(rf"^sweep {sweep} \(plan ([0-9a-f]{{16}})\)", (root / "docs" / doc).read_text(), re.M)
    assert len(documented) == 1
    assert documented[0] == load_plan(root / "examples" / plan).portable_hash


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("REPLAY_N = [", "REPLAY_M = ["), "[axes] REPLAY_M: is not a run variable"),
    (lambda t: t.replace("SFT_GE = 2", "TATU_RUN = \"x\""), "[base] TATU_RUN: is set by the sweep"),
    (lambda t: t.replace("drift_hi <", "drift_high <"), "unknown metric 'drift_high'"),
    (lambda t: t.replace("smallest REPLAY_N", "smallest SFT_GE"), "SFT_GE is not an axis"),
    (lambda t: t.replace("REPLAY_N = [0, 2]", "REPLAY_N = [0, -2]"), "member replay-n-2-s1: REPLAY_N"),
    (lambda t: t.replace("seeds = [1, 2]", "seeds = [1, 1]"), "seeds: repeated seeds"),
    (lambda t: t + "\n[extra]\n", "unknown key"),
    (lambda t: t.replace('name = "dose"', 'name = "a b"'), "name: 'a b'"),
    (lambda t: t + "[tune]\nREPLAY_N = [1, 2]\n", "[tune] REPLAY_N: must be a run variable that is not an axis"),
    # the TOML's shape (pydantic, as the run config): a type, an unknown key inside a section
    (lambda t: t.replace("seeds = [1, 2]", 'seeds = "1, 2"'), "seeds: Input should be a valid list"),
    (lambda t: t.replace("[base]\n", "[base]\nenv = 'run5.env'\n"), "[base] env: unknown key (known: env_file, vars)"),
    (lambda t: t.replace('rule = "', 'rules = "'), "[decision] rules: unknown key (known: baseline, mde, rule)"),
    # the stated effect of the report's seeds-for-MDE lines: a relative change above 0, below 1
    (lambda t: t.replace('rule = "', 'mde = "0%"\nrule = "'), "[decision] mde: '0%': expected a relative change"),
    (lambda t: t.replace('rule = "', 'mde = "two"\nrule = "'), "[decision] mde: 'two': expected a relative change"),
    (lambda t: t.replace('rule = "', 'mde = 1.5\nrule = "'), "[decision] mde: 1.5: expected a relative change"),
    (lambda t: t.replace('rule = "', 'mde = true\nrule = "'), "[decision] mde: True: expected a relative change"),
])
def test_bad_plans_are_refused_with_78_naming_file_and_key(tmp_path, edit, message):
    path = write_plan(tmp_path)
    path.write_text(edit(path.read_text()))
    with pytest.raises(SweepError) as caught:
        load_plan(path)
    assert caught.value.code == BAD_CONFIG
    assert str(path) in caught.value.message and message in caught.value.message, caught.value.message


def test_the_cli_exits_78_on_a_bad_plan_and_writes_nothing(tmp_path, capsys):
    path = write_plan(tmp_path)
    path.write_text(path.read_text().replace("REPLAY_N = [", "REPLAY_M = ["))
    assert tatu(["sweep", "start", str(path), "--foreground", "--sweeps", str(tmp_path / "sweeps")]) == BAD_CONFIG
    assert "REPLAY_M" in capsys.readouterr().err and not (tmp_path / "sweeps").exists()


def test_lock_is_written_once_and_a_changed_plan_is_refused(tmp_path):
    sweep_dir = tmp_path / "sweeps" / "dose"
    lock, what = reconcile(load_plan(write_plan(tmp_path)), sweep_dir)
    assert what == "locked" and lock_path(sweep_dir).is_file()
    assert read_lock(sweep_dir) == lock
    assert [m.name for m in lock.members_of()] == ["replay-n0-s1", "replay-n0-s2", "replay-n2-s1", "replay-n2-s2"]
    assert lock.plan.rule.text.startswith("smallest REPLAY_N") and lock.plan.baseline == {"REPLAY_N": "0"}
    before = lock_path(sweep_dir).read_bytes()
    assert reconcile(load_plan(write_plan(tmp_path)), sweep_dir)[1] == "unchanged"
    assert lock_path(sweep_dir).read_bytes() == before
    with pytest.raises(SweepError, match=r"locked .* with another plan \(changed: axes\)") as caught:
        reconcile(load_plan(write_plan(tmp_path, replay=(0, 4))), sweep_dir)
    assert caught.value.code == BAD_CONFIG
    with pytest.raises(SweepError, match="changed: rule"):
        reconcile(load_plan(write_plan(tmp_path, rule="largest REPLAY_N such that drift < 0.1")), sweep_dir)
    with pytest.raises(SweepError, match=r"seeds \[2\] are locked"):
        reconcile(load_plan(write_plan(tmp_path, seeds=(1,))), sweep_dir)
    assert lock_path(sweep_dir).read_bytes() == before  # nothing half-written by a refusal
    assert not list(sweep_dir.glob(".*tmp*"))


def test_adding_seeds_only_adds_members(tmp_path):
    sweep_dir = tmp_path / "sweeps" / "dose"
    lock, _ = reconcile(load_plan(write_plan(tmp_path)), sweep_dir)
    grown, what = reconcile(load_plan(write_plan(tmp_path, seeds=(1, 2, 3))), sweep_dir)
    assert what == "added seeds [3]"
    assert grown.members[:4] == lock.members  # the locked members are untouched
    assert [m.name for m in grown.members_of()][4:] == ["replay-n0-s3", "replay-n2-s3"]
    assert grown.plan.seeds == [1, 2, 3] and grown.history[0].seeds == (3,)


def test_a_tune_stage_locks_the_tune_members_first(tmp_path):
    sweep_dir = tmp_path / "sweeps" / "dose"
    lock, _ = reconcile(load_plan(write_plan(tmp_path, tune=TUNE)), sweep_dir)
    assert [m.name for m in lock.members_of()] == ["tune-lr0.001-s1", "tune-lr0.003-s1"]
    assert lock.members_of("compare") == [] and lock.tuned is None
    assert lock.tune_split["dev"].startswith("even") and lock.tune_split["judge"].startswith("odd")
    tune_member = lock.members_of()[0]
    assert tune_member.env["REPLAY_N"] == "0" and tune_member.env["TATU_LR"] == "0.001"  # the baseline config


def _member(tmp_path):
    lock, _ = reconcile(load_plan(write_plan(tmp_path)), tmp_path / "sweeps" / "dose")
    member = lock.members_of()[0]
    run_dir = Path(member.env["TATU_OUT"]) / member.run
    run_dir.mkdir(parents=True)
    return member, run_dir


def test_a_running_members_row_carries_its_last_forecast_and_a_finished_ones_does_not(tmp_path):
    from tatu.evals.forecast import BandPoint, Crossing, Forecast

    member, run_dir = _member(tmp_path)
    assert forecast_cell(member_status(member, UnitState("running"))) == ""  # no eval yet
    first = Forecast(16, 40, 0.061, 0.032, 0.098, 0.08, Crossing(None, None, None), [BandPoint(40, 0.061, 0.032, 0.098)], 3)
    later = Forecast(20, 40, 0.071, 0.05, 0.09, 0.08, Crossing(None, 30, None), [BandPoint(40, 0.071, 0.05, 0.09)], 4)
    records = [eval_record(8), eval_record(16, forecast=first), eval_record(20, forecast=later)]
    (run_dir / "events.jsonl").write_text("".join(json.dumps({"event": "eval", **r.to_json()}) + "\n" for r in records))
    assert forecast_cell(member_status(member, UnitState("running"))) == "forecast@40 +7.1% [+5.0%,+9.0%]"
    assert forecast_cell(member_status(member, UnitState("exited", 0))) == "forecast@40 +7.1% [+5.0%,+9.0%]"  # stopped
    (run_dir / "verdict.json").write_text(json.dumps(finished_verdict("holds").to_json()))
    assert forecast_cell(member_status(member, UnitState("absent"))) == ""


def test_member_state_is_derived_from_the_run_dir_and_the_unit(tmp_path):
    member, run_dir = _member(tmp_path)
    assert member_status(member, UnitState("absent")).state == "pending"
    assert member_status(member, UnitState("running")).state == "running"
    assert member_status(member, UnitState("exited", 0)).state == "pending"  # stopped: resume it
    fatal = member_status(member, UnitState("exited", 78))
    assert fatal.state == "fatal" and fatal.code == 78
    assert member_status(member, UnitState("exited", 65)).state == "fatal"
    assert member_status(member, UnitState("exited", 11)).state == "diverged"
    (run_dir / "events.jsonl").write_text(json.dumps({"event": "abort", "reason": "non-finite loss", "step": 3}) + "\n")
    assert member_status(member, UnitState("absent")).state == "diverged"
    (run_dir / "verdict.json").write_text(json.dumps(finished_verdict("forgets", aborted="drift +40% > 10%").to_json()))
    aborted = member_status(member, UnitState("exited", 10))
    assert (aborted.state, aborted.verdict, aborted.code) == ("aborted", "forgets", 10)
    (run_dir / "verdict.json").write_text(json.dumps(finished_verdict("holds").to_json()))
    assert member_status(member, UnitState("absent")).state == "done"
    # A member that wrote its verdict and is still exiting is done, and still holds its slot.
    exiting = member_status(member, UnitState("running"))
    assert exiting.state == "done" and exiting.alive
    assert not member_status(member, UnitState("absent")).alive


def test_summary_is_the_status_line():
    from types import SimpleNamespace

    def s(state):
        return SimpleNamespace(state=state)

    statuses = [s("done")] * 6 + [s("aborted"), s("running"), s("running")] + [s("pending")] * 11
    assert summary(statuses, 3 * 3600 + 600) == "7/20 done, 2 running, 1 aborted (forgets), ETA 3h10m"
    assert summary([s("done"), s("diverged")], None, "tune") == "tune: 2/2 done, 0 running, 1 diverged"


def _config(key, value, drift, drift_hi, change_hi, limit=0.10):
    return config_result(
        key, {"REPLAY_N": value}, (), effective={"MIX_FORGET_LIMIT": limit},
        metrics={"drift": drift, "drift_hi": drift_hi, "sftHeld_change_hi": change_hi},
        stats={"drift": ConfigStat(
                RelativeChange(drift, drift - 0.02, drift_hi), log_mean=math.log1p(drift), se=0.0, seed_sd=0.02,
                seed_effect_sd=0.0, within_se=0.005, shared_line_se=0.0, interaction_se=0.0, df=None, n_seeds=3, mde=None,
                # seeds alone (no shared-line part): the crossed CI is the t interval over seeds
                parts=CrossedParts(seed=0.02 ** 2, interaction=0.0, lines=0.0, n_lines=166), per_seed={}, outliers=()),
            "sftHeld": None})


def test_the_locked_rule_picks_the_smallest_passing_value(tmp_path):
    plan = rule_plan("smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT and sftHeld_change_hi < 0",
                     {"REPLAY_N": ["0", "2", "6"]}, tmp_path / "p.toml")
    configs = [_config("replay-n6", "6", 0.01, 0.03, -0.5), _config("replay-n0", "0", 0.40, 0.45, -0.6),
               _config("replay-n2", "2", 0.07, 0.12, -0.55)]
    verdict = decide(plan, configs)
    assert verdict.chosen == "6" and verdict.line.startswith("REPLAY_N=6: the smallest REPLAY_N such that")
    assert [c.value for c in verdict.checks] == ["0", "2", "6"]  # numeric order, not the given one
    assert verdict.checks[1].failed[0].condition == "drift_hi < MIX_FORGET_LIMIT"
    # REPLAY_N=2 fails only by its CI bound: more seeds could settle it, and the report says so.
    # log1p(10%) - log1p(7%) = 0.0277; t_{n-1} * 0.02 / sqrt(n) drops under it at n = 5: 2 more than 3.
    assert any(note.startswith("REPLAY_N=2: its drift point estimate +7.0% passes; about 2 more seeds")
               for note in verdict.would_change), verdict.would_change
    # When the shared lines alone hold the CI wider than the margin, no number of seeds narrows it.
    configs[2].stats["drift"] = dataclasses.replace(
        configs[2].stats["drift"], parts=CrossedParts(seed=0.02 ** 2, interaction=0.0, lines=0.015 ** 2, n_lines=166))
    assert any(note.startswith("REPLAY_N=2: its drift point estimate +7.0% passes; no number of seeds would narrow "
                               "drift_hi enough to pass with these 166 lines (more lines would)")
               for note in decide(plan, configs).would_change)
    # A tighter CI on 2 flips the verdict to 2; nothing passing -> said plainly.
    configs[2] = _config("replay-n2", "2", 0.07, 0.09, -0.55)
    assert decide(plan, configs).chosen == "2"
    verdict = decide(rejudged(plan, "smallest REPLAY_N such that drift_hi < 1%"), configs)
    assert verdict.chosen is None and verdict.line.startswith("no REPLAY_N satisfies")


def test_the_example_plans_parse(tmp_path):
    examples = Path(__file__).resolve().parents[2] / "examples"
    plain = load_plan(examples / "sweep-replay.toml")
    assert [m.name for m in plain.compare_members(tmp_path, None)][:3] == ["replay-n0-s1", "replay-n0-s2", "replay-n0-s3"]
    assert plain.axes == {"REPLAY_N": ["0", "2", "6"]} and plain.base_env["TATU_DATA"].endswith("/demo/data")
    tuned = load_plan(examples / "sweep-replay-tuned.toml")
    assert tuned.tune_var == "TATU_LR" and len(tuned.tune_members(tmp_path)) == 6


def test_the_coordinator_unit_passes_systemd_analyze_verify(tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    from unit_files import parse_unit

    from tatu.ops.units import render_unit, units_dir

    unit = parse_unit((units_dir() / "tatu-sweep@.service").read_text())
    service = unit["Service"]
    assert service["Type"] == ["notify"] and service["Restart"] == ["on-failure"]
    assert service["RestartPreventExitStatus"] == ["65 78"]
    assert service["EnvironmentFile"] == ["%E/tatu/sweeps/%i.env"]
    assert service["ExecStart"] == ["@TATU_BIN@ sweep coordinate"]
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        from strict import cannot_run

        cannot_run("systemd-analyze not installed")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    instance = tmp_path / "tatu-sweep@verify.service"
    instance.write_text(render_unit((units_dir() / "tatu-sweep@.service").read_text(), Path(sys.executable), tmp_path))
    proc = subprocess.run([analyze, "--user", "verify", str(instance)], capture_output=True, text=True,
                          env={**os.environ, "XDG_RUNTIME_DIR": str(runtime), "XDG_CONFIG_HOME": str(tmp_path / "cfg")},
                          timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_a_second_coordinator_of_the_same_sweep_exits_at_once(tmp_path):
    import fcntl
    import io

    from tatu.sweep.run.backends import ForegroundBackend
    from tatu.sweep.run.coordinator import Coordinator

    sweep_dir = tmp_path / "sweeps" / "dose"
    reconcile(load_plan(write_plan(tmp_path)), sweep_dir)
    with open(sweep_dir / "coordinator.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the first coordinator
        out = io.StringIO()
        assert Coordinator(sweep_dir, ForegroundBackend(sweep_dir), 1, out=out).run() == 1
    assert "another coordinator is running this sweep" in out.getvalue()
    assert not (Path(read_lock(sweep_dir).members_of()[0].env["TATU_OUT"])).exists()  # it started nothing


class RecordingBackend:
    """A stand-in for a GPU machine's backend (none here): it records starts and reports the
    states the test sets. What it checks is the coordinator's slot and device bookkeeping."""

    name = "recording"

    def __init__(self, env_dir: Path):
        self.states: dict[str, UnitState] = {}
        self.started: list[tuple[str, str | None]] = []
        self.env_dir = env_dir

    def start(self, member, device):
        self.started.append((member.name, device))
        self.states[member.run] = UnitState("running")
        self.env_path(member).write_text(f"TATU_DEVICE={device}\n")

    def poll(self, member):
        return self.states.get(member.run, UnitState("absent"))

    def stop(self, member):
        self.states[member.run] = UnitState("exited", 0)

    def env_path(self, member):
        return self.env_dir / f"{member.run}.env"

    def last_error(self, member):
        return ""


def test_the_coordinator_keeps_k_members_on_k_devices(tmp_path):
    import io

    from tatu.sweep.run.coordinator import Coordinator

    sweep_dir = tmp_path / "sweeps" / "dose"
    lock, _ = reconcile(load_plan(write_plan(tmp_path, seeds=(1, 2, 3))), sweep_dir)
    backend = RecordingBackend(tmp_path)
    coordinator = Coordinator(sweep_dir, backend, 2, ["cuda:0", "cuda:1"], out=io.StringIO())
    outcome, statuses, _ = coordinator.pass_once()
    assert outcome == "running" and backend.started == [("replay-n0-s1", "cuda:0"), ("replay-n0-s2", "cuda:1")]
    assert coordinator.pass_once()[0] == "running" and len(backend.started) == 2  # both slots busy
    # The member on cuda:1 finishes; its slot (that device) goes to the next member. A new
    # coordinator (a restart) knows the busy device from the running member's env file.
    first, second = lock.members_of()[:2]
    run_dir = Path(second.env["TATU_OUT"]) / second.run
    run_dir.mkdir(parents=True)
    (run_dir / "verdict.json").write_text(json.dumps(finished_verdict("holds").to_json()))
    assert coordinator.pass_once()[0] == "running" and len(backend.started) == 2  # still exiting: slot held
    backend.states[second.run] = UnitState("absent")
    restarted = Coordinator(sweep_dir, backend, 2, ["cuda:0", "cuda:1"], out=io.StringIO())
    restarted.pass_once()
    assert backend.started[2] == ("replay-n0-s3", "cuda:1")


def test_tatu_sweep_plan_prints_members_configs_hash_and_cost(tmp_path, capsys):
    path = write_plan(tmp_path)
    plan = load_plan(path)
    assert tatu(["sweep", "plan", str(path), "--sweeps", str(tmp_path / "sweeps")]) == 0
    out = capsys.readouterr().out
    assert f"plan hash {plan.portable_hash}" in out and f"absolute paths: {plan.hash}" in out
    assert "members: 0 tune + 4 comparison" in out
    assert "[compare] replay-n2-s2  run dose.replay-n2-s2" in out and "REPLAY_N               = 2" in out
    assert "cost: unknown" in out  # no measured run yet: said, not guessed
    assert not (tmp_path / "sweeps").exists()  # planning locks nothing
    assert tatu(["sweep", "plan", str(path), "--full"]) == 0
    assert "TATU_WEIGHT_DECAY      = 0.1" in capsys.readouterr().out
    lock, _ = reconcile(plan, tmp_path / "sweeps" / "dose")
    assert lock.members[0].config["TATU_WEIGHT_DECAY"] == 0.1 and len(lock.members[0].config_hash) == 12


def test_an_unresolved_neighbour_says_how_many_seeds_would_resolve_it(tmp_path):
    import numpy as np

    rng = np.random.default_rng(4)
    base_lines = rng.gamma(3.0, 1.0, 60)

    def results(shift):
        out = []
        for seed in (1, 2, 3):
            end = base_lines * (1 + shift + rng.normal(0, 0.01)) + rng.normal(0, 0.01, 60)
            scores = lambda nll: {"enRuler": {"nll_sum": list(nll), "line_tokens": [1] * 60, "line_index": list(range(60))}}
            out.append(member_result("replay", seed, scores(base_lines), scores(end)))
        return out

    plan = rule_plan("smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT", {"REPLAY_N": ["2", "4"]},
                     tmp_path / "p.toml")
    two, four = _config("replay-n2", "2", 0.12, 0.15, -0.5), _config("replay-n4", "4", 0.05, 0.08, -0.5)
    two, four = dataclasses.replace(two, results=results(0.012)), dataclasses.replace(four, results=results(0.010))
    verdict = decide(plan, [two, four])
    assert verdict.chosen == "4"
    note = next(n for n in verdict.would_change if n.startswith("REPLAY_N=2 vs 4: drift difference not resolved"))
    # Per seed: log ppl_end(4) - log ppl_end(2) (same baseline, one token a line: means of NLL).
    diffs = [np.mean(r4.lines["end"]["enRuler"]["nll_sum"]) - np.mean(r2.lines["end"]["enRuler"]["nll_sum"])
             for r2, r4 in zip(two.results, four.results)]
    # The seeds whose crossed CI resolves that difference at 80% power, by a loop over n with
    # scipy's t, from the paired comparison's measured variance parts.
    from tatu.sweep.judge.stats import paired_stats

    parts = dataclasses.asdict(paired_stats(four.results, two.results, "enRuler", None, 99).parts)
    needed = _naive_seeds_needed(parts, float(np.mean(diffs)))
    assert needed is not None and needed > 3 and parts["seed"] > 0 and parts["lines"] > 0, parts
    assert f"{needed - 3} more seeds would resolve it" in note, note


def _naive_seeds_needed(parts: dict, effect: float, power: float = 0.8) -> int | None:
    """Smallest n with (t_.975 + t_power) * SE(n) <= |effect|, SE^2 = (seed + interaction)/n + lines,
    Satterthwaite's df over the expected mean squares (seeds and lines both present)."""
    from scipy import stats as sp

    for n in range(2, 10000):
        inter = parts["interaction"] / n
        seed_ms, line_ms = parts["seed"] / n + inter, parts["lines"] + inter
        var = seed_ms + line_ms - inter
        df = var ** 2 / (seed_ms ** 2 / (n - 1) + line_ms ** 2 / (parts["n_lines"] - 1)
                         + inter ** 2 / ((n - 1) * (parts["n_lines"] - 1)))
        if (sp.t.ppf(0.975, df) + sp.t.ppf(power, df)) * math.sqrt(var) <= abs(effect):
            return n
    return None


def test_a_rule_names_the_comparison_it_judges_end_by_default(tmp_path):
    from tatu.sweep.plan.rule import parse_rule

    axes = {"REPLAY_N": ["0", "2"]}
    path = tmp_path / "p.toml"
    plain = parse_rule("smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT", axes, path)
    assert plain.at == "end" and plain.conditions[-1].value == "MIX_FORGET_LIMIT"
    assert parse_rule("smallest REPLAY_N such that drift_hi < 5% at the end", axes, path).at == "end"
    common = parse_rule("smallest REPLAY_N such that drift_hi < 5% and sftHeld_change_hi < 0 at the common step", axes, path)
    assert common.at == "common" and [c.text() for c in common.conditions] == ["drift_hi < 5%", "sftHeld_change_hi < 0"]
    with pytest.raises(SweepError, match="at the common step"):
        parse_rule("smallest REPLAY_N such that at the common step", axes, path)
    # The common step is judged on metrics_common, n/a when members kept no per-line scores.
    plan = rule_plan("smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT at the common step",
                     {"REPLAY_N": ["0", "2"]}, path)
    far, near = _config("replay-n0", "0", 0.40, 0.45, -0.6), _config("replay-n2", "2", 0.30, 0.35, -0.6)
    far, near = dataclasses.replace(far, metrics_common={"drift_hi": 0.05}), dataclasses.replace(near, metrics_common=None)
    verdict = decide(plan, [near, far])
    assert verdict.chosen == "0" and verdict.at == "common"
    assert verdict.checks[1].missing == ("drift_hi",)


def test_two_sets_whose_names_have_the_same_length_get_their_own_resampling(tmp_path):
    import numpy as np

    from tatu.sweep.judge.stats import config_stats

    rng = np.random.default_rng(9)
    base = rng.gamma(3.0, 1.0, 50)
    results = []
    for seed in (1, 2, 3):
        end = list(base * (1.05 + rng.normal(0, 0.02)) + rng.normal(0, 0.05, 50))
        scores = {name: {"nll_sum": nll, "line_tokens": [1] * 50, "line_index": list(range(50))}
                  for name, nll in (("enRuler", None), ("sftHeld", None))}
        start = {name: {**s, "nll_sum": list(base)} for name, s in scores.items()}
        finish = {name: {**s, "nll_sum": end} for name, s in scores.items()}
        results.append(member_result("m", seed, start, finish))
    ruler, held = config_stats(results, "enRuler", None, 0), config_stats(results, "sftHeld", None, 0)
    assert ruler.log_mean == held.log_mean  # the same per-line scores under both names...
    assert ruler.se != held.se  # ... but not the same bootstrap draws (both names have 7 letters)


def test_a_forget_abort_is_a_result_once_its_verdict_is_written(tmp_path):
    """The daemon logs a forget abort (exit 10), saves, then writes its verdict: in between, the
    member has no result yet (the coordinator read its run dir there and fell over the missing verdict)."""
    member, run_dir = _member(tmp_path)
    (run_dir / "events.jsonl").write_text(json.dumps({"event": "abort", "reason": "drift +40% > 10%", "step": 4,
                                                      "code": 10}) + "\n")
    assert member_status(member, UnitState("running")).state == "running"
    assert member_status(member, UnitState("absent")).state == "pending"
    (run_dir / "verdict.json").write_text(json.dumps(finished_verdict("forgets", aborted="drift +40% > 10%").to_json()))
    aborted = member_status(member, UnitState("absent"))
    assert (aborted.state, aborted.verdict, aborted.code) == ("aborted", "forgets", 10)


@pytest.mark.parametrize("reason", ["non-finite loss", "non-finite gradient norm", "non-finite eval", "non-finite tensor"])
def test_a_member_that_went_non_finite_is_diverged_by_its_exit_code(tmp_path, reason):
    """By the abort's exit code (11), whatever its words; an abort of a run from before events had a
    code is non-finite when no verdict says it aborted; a restart after it ends nothing."""
    member, run_dir = _member(tmp_path)
    for event in ({"event": "abort", "reason": reason, "step": 3, "code": 11}, {"event": "abort", "reason": reason, "step": 3}):
        (run_dir / "events.jsonl").write_text(json.dumps(event) + "\n")
        status = member_status(member, UnitState("absent"))
        assert (status.state, status.verdict, status.code, status.detail) == ("diverged", "diverged", 11, reason)
    with open(run_dir / "events.jsonl", "a") as f:
        f.write(json.dumps({"event": "resumed", "step": 2}) + "\n")
    assert member_status(member, UnitState("absent")).state == "pending"

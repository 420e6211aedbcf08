"""Sweeps for real, in the foreground backend (members are daemon child processes):

- a tune + compare sweep that runs through, and its twin whose coordinator and members are
  SIGKILLed at random moments and restarted: bit-identical final weights, identical report
  numbers; a finished sweep started again does nothing and says so;
- the tune stage chooses on the dev half of sftHeld (checked against a naive re-scoring);
- exit 10 of a member is a result, exit 78 stops the sweep with the member's reason.
"""
from __future__ import annotations

import json
import math
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sweep_world import plan_text, plan_world, run_through, start_foreground as start
from tiny_world import clean_environ

from tatu.sweep.lock import members, read_lock

pytestmark = pytest.mark.slow

TUNE = "[tune]\nTATU_LR = [1e-3, 3e-3]\nseeds = [1]\n"
# One thread per member, fixed by the plan: K=2 members fill the 2 cores without oversubscribing
# them. At torch's default count (2 each), a member that was never interrupted twice ended a few
# ulps from its twin in CI, a rare straight-run difference this test cannot tell from a resume's
# (docs/operations.md, "CPU matmul sums"). The default count's start line is checked in
# tests/sweep/test_configs_run.py.
THREADS = 1


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_trunk):
    root, plan = plan_world(tmp_path_factory, tiny_trunk, "tuned", tune=TUNE, extra=f", TATU_THREADS = {THREADS}")
    return {"root": root, "data": tiny_trunk["data"], "trunk": tiny_trunk["trunk"], "plan": plan}


@pytest.fixture(scope="module")
def reference(world):
    sweeps = world["root"] / "ref"
    out = run_through(world["plan"], sweeps, "compare: 4/4 done")
    assert f"threads: TATU_THREADS={THREADS} for every member (the plan)" in out
    # The elapsed time beside the estimate `tatu sweep plan` would make (the trunk's run is measured).
    assert re.search(r"; took (\d+m)?\d+s \(estimated (\d+m)?\d+s at K=2\);", out), out
    return sweeps / "tuned"


def _saved_mid_run(sweep_dir: Path, stage: str | None = None) -> bool:
    """A member of `stage` (of any, if None) has saved a scheduled resume state and has no verdict yet."""
    lock_file = sweep_dir / "plan.lock.json"
    if not lock_file.exists():
        return False
    for m in members(read_lock(sweep_dir), stage):
        run = Path(m.env["TATU_OUT"]) / m.run
        events = run / "events.jsonl"
        if events.exists() and not (run / "verdict.json").exists() and '"reason": "scheduled"' in events.read_text():
            return True
    return False


@pytest.fixture(scope="module")
def killed(world):
    """The same plan, its coordinator and members SIGKILLed at moments chosen by a seeded RNG
    once members are mid-run (in the tune stage, then in the comparison), started again."""
    sweeps = world["root"] / "killed"
    sweep_dir = sweeps / "tuned"
    rng = random.Random(12)
    kills = 0
    for stage in ("tune", "compare", "compare"):
        coordinator = start(world["plan"], sweeps, wait=False)
        deadline = time.monotonic() + 300
        while not _saved_mid_run(sweep_dir, stage) and coordinator.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(rng.uniform(0.0, 3.0))
        # Still mid-run at the kill (a member of any stage): on a fast machine the member seen
        # above may have finished during the sleep, and a kill between members would prove nothing.
        while not _saved_mid_run(sweep_dir) and coordinator.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if coordinator.poll() is not None:
            break
        children = psutil.Process(coordinator.pid).children(recursive=True)
        for child in children:
            if rng.random() < 0.7:  # some members die hard, the rest get the coordinator's death (SIGTERM)
                child.send_signal(signal.SIGKILL)
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(timeout=30)
        kills += 1
        psutil.wait_procs(children, timeout=120)
    proc = start(world["plan"], sweeps)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return sweep_dir, kills


def final_weights(sweep_dir: Path) -> dict[str, bytes]:
    lock = read_lock(sweep_dir)
    return {m.name: (Path(m.env["TATU_OUT"]) / m.run / "final" / "model.safetensors").read_bytes() for m in members(lock)}


def report_numbers(sweep_dir: Path) -> str:
    from tatu.sweep.analysis import analyze

    data = analyze(sweep_dir)
    for stage in (data["tune"], data["compare"]):
        for config in stage["configs"]:
            config.pop("effective")  # holds this sweep's own paths (TATU_OUT, TATU_RUN dirs)
    return json.dumps(data, sort_keys=True)


def test_killed_and_restarted_sweep_equals_the_run_through(reference, killed):
    killed_dir, kills = killed
    assert kills >= 2
    resumed = []
    for m in members(read_lock(killed_dir)):
        events = [json.loads(line) for line in (Path(m.env["TATU_OUT"]) / m.run / "events.jsonl").read_text().splitlines() if line.strip()]
        resumed += [m.name for e in events if e["event"] == "resumed"]
    assert resumed, "no member was interrupted mid-run: the kills proved nothing"
    ref, got = final_weights(reference), final_weights(killed_dir)
    assert ref.keys() == got.keys() and len(ref) == 6
    assert all(ref[name] == got[name] for name in ref), [n for n in ref if ref[n] != got[n]]
    assert read_lock(reference)["tuned"] == read_lock(killed_dir)["tuned"]
    assert report_numbers(reference) == report_numbers(killed_dir)


def test_a_finished_sweep_started_again_does_nothing_and_says_so(world, reference):
    sizes = {p: p.stat().st_size for p in reference.rglob("events.jsonl")}
    proc = start(world["plan"], reference.parent)
    assert proc.returncode == 0
    assert "plan unchanged" in proc.stdout and "already finished (compare: 4/4 done, 0 running); nothing to do" in proc.stdout
    assert {p: p.stat().st_size for p in reference.rglob("events.jsonl")} == sizes
    # The cost estimate comes from measured step and eval times (the members', then the trunk's).
    planned = subprocess.run([sys.executable, "-m", "tatu.ops.cli", "sweep", "plan", str(world["plan"]), "--sweeps",
                              str(reference.parent)], env=clean_environ(), capture_output=True, text=True, timeout=120)
    assert planned.returncode == 0 and re.search(r"cost: 6 members, \S+ of runs in all \(measured by tuned\.", planned.stdout), planned.stdout


def _naive_dev_ppl(ckpt: Path, held: Path) -> float:
    """sftHeld's even lines, one at a time, NLL summed in float64 (no batching, no tatu scoring)."""
    import torch

    from tatu.model.chat import encode_pair
    from tatu.model.checkpoint import load_checkpoint

    loaded = load_checkpoint(ckpt)
    model = loaded.build_model("cpu").eval()
    rows = [json.loads(line) for line in held.read_text().splitlines() if line.strip()]
    nll, tokens = 0.0, 0
    with torch.no_grad():
        for i, row in enumerate(rows):
            if i % 2:
                continue
            ids, is_target = encode_pair(loaded.tokenizer, row["prompt"], row["response"])
            logits, _ = model(torch.tensor([ids[:-1]]))
            logp = torch.log_softmax(logits[0].double(), dim=-1)
            for pos in range(1, len(ids)):
                if is_target[pos]:
                    nll -= float(logp[pos - 1, ids[pos]])
                    tokens += 1
    return math.exp(nll / tokens)


def test_the_tune_stage_chooses_on_the_dev_half_and_locks_the_value(world, reference):
    lock = read_lock(reference)
    tuned = lock["tuned"]
    assert tuned["var"] == "TATU_LR" and tuned["selected_on"].startswith("sftHeld dev half")
    manifest = json.loads((world["data"] / "manifest.json").read_text())
    held = world["data"] / manifest["evals"]["sftHeld"]["file"]
    dev = {m.values["TATU_LR"]: _naive_dev_ppl(Path(m.env["TATU_OUT"]) / m.run / "final", held)
           for m in members(lock, "tune")}
    assert tuned["value"] == min(dev, key=dev.get), (dev, tuned)
    # The comparison members run with the chosen value; the report shows both stages.
    assert all(m.env["TATU_LR"] == tuned["value"] for m in members(lock, "compare"))
    proc = subprocess.run([sys.executable, "-m", "tatu.ops.cli", "sweep", "report", "tuned", "--sweeps", str(reference.parent)],
                          env=clean_environ(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "tune stage: TATU_LR" in out and f"TATU_LR={tuned['value']} <- chosen" in out
    assert "comparison stage (sftHeld: judge half)" in out and "Holm over 1 comparisons" in out
    assert "VERDICT (locked rule): " in out
    for name in ("index.html", "report.json", "drift_vs_axis.png", "tradeoff.png"):
        assert (reference / "report" / name).stat().st_size > 0


def test_report_drift_is_the_daemons_drift(reference):
    """The re-scored start/end per-line sums give back the drift the daemon logged at its last eval."""
    from tatu.sweep.analysis import member_result
    from tatu.sweep.stats import run_lines

    for m in members(read_lock(reference), "compare"):
        result = member_result(m, reference)
        assert math.expm1(run_lines(result, "enRuler").log_ratio()) == pytest.approx(result["daemon_drift"], abs=1e-9)


def test_exit_10_is_a_result_and_exit_78_stops_the_sweep(world):
    # Member 1 forgets (no replay, a high LR, a 2% limit): a result. Member 2 asks for a longer
    # context than the trunk has: the daemon exits 78 and the sweep stops, naming it.
    plan = world["root"] / "bad.toml"
    text = plan_text("bad", world["data"], world["trunk"], seeds=(1,), replay=(0,), steps=6,
                     rule="smallest REPLAY_N such that drift < 0.5",
                     extra=", MIX_FORGET_LIMIT = 0.02, TATU_GRAD_CLIP = 0").replace("TATU_LR = 3e-3", "TATU_LR = 3e-2")
    text = text.replace("[axes]\nREPLAY_N = [0]", "[axes]\nREPLAY_N = [0]\nTATU_SEQ_LEN = [192, 256]")
    text = text.replace("TATU_SEQ_LEN = 192, ", "")
    plan.write_text(text)
    proc = start(plan, world["root"] / "bad-sweeps", "-K", "1")
    sweep_dir = world["root"] / "bad-sweeps" / "bad"
    assert proc.returncode == 78, proc.stdout + proc.stderr
    assert "replay-n0-seq-len192-s1: aborted (forgets)" in proc.stdout
    stop = json.loads((sweep_dir / "stop.json").read_text())
    assert stop["code"] == 78 and stop["member"] == "replay-n0-seq-len256-s1"
    assert "TATU_SEQ_LEN=256 exceeds the model's block_size 192" in stop["reason"]
    assert "sweep stopped: member replay-n0-seq-len256-s1 exited 78" in proc.stdout


def test_stop_saves_the_members_and_start_continues(world):
    plan = world["root"] / "stopme.toml"
    plan.write_text(plan_text("stopme", world["data"], world["trunk"], seeds=(1,), replay=(2,), steps=40))
    sweeps = world["root"] / "stop-sweeps"
    sweep_dir = sweeps / "stopme"
    coordinator = start(plan, sweeps, wait=False)
    member = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and coordinator.poll() is None:
        if (sweep_dir / "plan.lock.json").exists():
            member = members(read_lock(sweep_dir))[0]
            events = Path(member.env["TATU_OUT"]) / member.run / "events.jsonl"
            if events.exists() and '"event": "ready"' in events.read_text():
                break
        time.sleep(0.2)
    assert member is not None and coordinator.poll() is None
    env = clean_environ()
    stop = subprocess.run([sys.executable, "-m", "tatu.ops.cli", "sweep", "stop", "stopme", "--sweeps", str(sweeps)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0 and "stop requested" in stop.stdout, stop.stdout + stop.stderr
    assert coordinator.wait(timeout=300) == 0
    run = Path(member.env["TATU_OUT"]) / member.run
    saved = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if '"checkpoint"' in line]
    assert saved[-1]["reason"] == "stop" and not (run / "verdict.json").exists()
    status = subprocess.run([sys.executable, "-m", "tatu.ops.cli", "sweep", "status", "stopme", "--sweeps", str(sweeps)],
                            env=env, capture_output=True, text=True, timeout=120)
    assert "0/1 done, 0 running" in status.stdout and "stopped: " in status.stdout, status.stdout
    again = start(plan, sweeps)
    assert again.returncode == 0 and "continuing a stopped sweep" in again.stdout, again.stdout + again.stderr
    assert "sweep finished: 1/1 done" in again.stdout
    resumed = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if '"resumed"' in line]
    assert [e["step"] for e in resumed] == [saved[-1]["step"]]

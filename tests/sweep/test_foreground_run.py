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
import warnings
from pathlib import Path

import psutil
import pytest

from sweep_world import (assert_every_p_agrees_with_its_ci, plan_text, plan_world, report_numbers, run_through,
                         start_foreground as start)
from tiny_world import clean_environ

from tatu.envfile import parse_env_file
from tatu.sweep.plan.lock import read_lock

pytestmark = pytest.mark.slow

TUNE = "[tune]\nTATU_LR = [1e-3, 3e-3]\nseeds = [1]\n"
# The members run at torch's default thread count (the plan leaves TATU_THREADS unset), the users'
# default. There a member that was never interrupted rarely ends a few ulps from its twin (twice in
# CI; measured rate and what it touches: docs/operations.md, "CPU matmul sums"), which bits alone
# cannot tell from a resume's error. So the two sweeps are compared exactly, and a member whose
# bits differ is held to the tolerances below instead (see assert_close_run for why they are safe).
# The resume's own bit-identity is proven exactly by the single-daemon kill -9 test
# (tests/daemon/test_daemon.py::test_sigkill_at_random_moments_then_resume_is_bit_identical).
#
# The tolerances, measured against a thread-count change (bench/straight_tolerance.py: the same
# sweep at TATU_THREADS=1 and at the default count, which alters LayerNorm's gradient sums at every
# step, as large as the rare difference or larger: numbers in docs/operations.md):
# - the final weights' relative L2 distance, ||a - b|| / ||a||: 1.5e-5 at most there; another
#   seed or learning rate of this sweep is 2e-2 to 8e-2. (Not a per-element bound: Adam turns a
#   last-bit change of a gradient near 0 into a step of up to the learning rate for that element,
#   1e-4 there.)
WEIGHT_RTOL = 1e-3
# - each step's training loss, relative: 5e-8 at most there; another seed's batches are far
#   outside it at every step (test_the_tolerances_tell_another_run_from_a_few_ulps).
LOSS_RTOL = 1e-5
# - every float of the report and of the lock's tune choice, relative (absolute near 0): 2.5e-4 at
#   most there (a paired test's p-value), far below the judged effects (percents, against CIs
#   several percent wide). Every string, int, key and decision must be equal.
NUMBER_RTOL = 2e-3
NUMBER_ATOL = 1e-4


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_trunk):
    root, plan = plan_world(tmp_path_factory, tiny_trunk, "tuned", tune=TUNE)
    return {"root": root, "data": tiny_trunk["data"], "trunk": tiny_trunk["trunk"], "plan": plan}


@pytest.fixture(scope="module")
def reference(world):
    sweeps = world["root"] / "ref"
    out = run_through(world["plan"], sweeps, "compare: 4/4 done")
    assert "threads: not fixed by the plan, so each member takes its backend's count" in out
    # The elapsed time beside the estimate `tatu sweep plan` would make (the trunk's run is measured).
    assert re.search(r"; took (\d+m)?\d+s \(estimated (\d+m)?\d+s at K=2\);", out), out
    return sweeps / "tuned"


def _saved_mid_run(sweep_dir: Path, stage: str | None = None) -> bool:
    """A member of `stage` (of any, if None) has saved a scheduled resume state and has no verdict yet."""
    lock_file = sweep_dir / "plan.lock.json"
    if not lock_file.exists():
        return False
    for m in read_lock(sweep_dir).members_of(stage):
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
    return {m.name: (Path(m.env["TATU_OUT"]) / m.run / "final" / "model.safetensors").read_bytes() for m in lock.members_of()}


def step_losses(sweep_dir: Path) -> dict[str, list]:
    """Each member's (step, loss) of every step event: a resumed member logs a step it redid again."""
    out = {}
    for m in read_lock(sweep_dir).members_of():
        events = (Path(m.env["TATU_OUT"]) / m.run / "events.jsonl").read_text().splitlines()
        steps = {}
        for e in (json.loads(line) for line in events if line.strip()):
            if e["event"] == "step":
                steps[e["step"]] = e["loss"]
        out[m.name] = sorted(steps.items())
    return out


def numbers_apart(a, b, path: str = "", rtol: float | None = None, atol: float | None = None) -> list[str]:
    """Where two JSON-like values differ: floats beyond rtol/atol (NUMBER_RTOL/NUMBER_ATOL unless
    given), anything else at all."""
    rtol = NUMBER_RTOL if rtol is None else rtol
    atol = NUMBER_ATOL if atol is None else atol
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
            if a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rtol, abs_tol=atol):
                return []
        return [f"{path}: {a!r} vs {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a.keys() ^ b.keys())}"]
        return [d for k in a for d in numbers_apart(a[k], b[k], f"{path}/{k}", rtol, atol)]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in numbers_apart(x, y, f"{path}[{i}]", rtol, atol)]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def weights_apart(a: bytes, b: bytes) -> tuple[float, list[str]]:
    """(the relative L2 distance ||a - b|| / ||a|| of two model.safetensors' weights, in float64,
    what is not comparable)."""
    from safetensors.torch import load

    ta, tb = load(a), load(b)
    if ta.keys() != tb.keys():
        return math.inf, [f"tensors {sorted(ta.keys() ^ tb.keys())}"]
    bad = [k for k in ta if ta[k].shape != tb[k].shape or ta[k].dtype != tb[k].dtype]
    if bad:
        return math.inf, [f"shape or dtype of {bad}"]
    gap = sum(float((ta[k].double() - tb[k].double()).pow(2).sum()) for k in ta)
    size = sum(float(ta[k].double().pow(2).sum()) for k in ta)
    return math.sqrt(gap / size), []


def assert_close_run(ref: Path, got: Path) -> list[str]:
    """The killed sweep equals the run-through: weights byte-equal, or (for a member whose bits
    differ) within WEIGHT_RTOL; the per-step losses within LOSS_RTOL; the tune choice and the
    report numbers equal except floats within NUMBER_RTOL. Returns the members whose bits differed.

    Why the tolerances are safe: the rare straight-run difference at 2 threads starts as a few
    ulps in the weights after one update (docs/operations.md); a change of the thread count, which
    alters LayerNorm's gradient sums at every step, stays 8x (report floats), 70x (weights) and
    200x (losses) inside them (bench/straight_tolerance.py). A resume error that matters (a skipped,
    repeated or reordered batch, lost Adam moments, another LR step or RNG state) feeds the model
    other batches or other updates, as another seed or learning rate does, and those are far
    outside: test_the_tolerances_tell_another_run_from_a_few_ulps checks that on this sweep's own
    members. Bit-identity of a resume is still asserted exactly where one daemon runs alone
    (tests/daemon/test_daemon.py::test_sigkill_at_random_moments_then_resume_is_bit_identical)."""
    ref_w, got_w = final_weights(ref), final_weights(got)
    assert ref_w.keys() == got_w.keys() and len(ref_w) == 6
    apart = [name for name in ref_w if ref_w[name] != got_w[name]]
    for name in apart:
        biggest, problems = weights_apart(ref_w[name], got_w[name])
        assert not problems and biggest <= WEIGHT_RTOL, (name, biggest, problems)
    losses = numbers_apart(step_losses(ref), step_losses(got), "losses", rtol=LOSS_RTOL, atol=0.0)
    assert not losses, losses[:10]
    for what, a, b in (("tuned", read_lock(ref).tuned.to_json(), read_lock(got).tuned.to_json()),
                       ("report", json.loads(report_numbers(ref)), json.loads(report_numbers(got)))):
        differences = numbers_apart(a, b, what)
        assert not differences, differences[:10]
    return apart


def test_killed_and_restarted_sweep_equals_the_run_through(reference, killed):
    killed_dir, kills = killed
    assert kills >= 2
    resumed = []
    for m in read_lock(killed_dir).members_of():
        events = [json.loads(line) for line in (Path(m.env["TATU_OUT"]) / m.run / "events.jsonl").read_text().splitlines() if line.strip()]
        resumed += [m.name for e in events if e["event"] == "resumed"]
    assert resumed, "no member was interrupted mid-run: the kills proved nothing"
    apart = assert_close_run(reference, killed_dir)
    if apart:  # within the tolerances, and said: the rare straight-run difference or a resume's, the bits cannot tell
        warnings.warn(f"members whose final bits differ from the run-through's (within the tolerances): {apart}")


def test_the_tolerances_tell_another_run_from_a_few_ulps(reference):
    """The tolerances are not blind: members of this sweep that differ in one thing (the learning
    rate; the seed) are far outside them, in weights and in every step's loss after the first,
    and a member's weights moved by a few ulps (the documented straight-run difference) inside."""
    import torch
    from safetensors.torch import load, save

    lock = read_lock(reference)
    by_name = {m.name: m for m in lock.members_of()}
    weights = {n: (Path(m.env["TATU_OUT"]) / m.run / "final" / "model.safetensors").read_bytes() for n, m in by_name.items()}
    losses = step_losses(reference)
    tune = sorted(m.name for m in lock.members_of("tune"))
    compare = sorted(m.name for m in lock.members_of("compare"))
    seeds = [n for n in compare if n != compare[0] and by_name[n].values.get("REPLAY_N") == by_name[compare[0]].values.get("REPLAY_N")]
    assert len(tune) == 2 and seeds, (tune, compare)
    for a, b in ((tune[0], tune[1]), (compare[0], seeds[0])):
        distance, problems = weights_apart(weights[a], weights[b])
        assert not problems and distance > 10 * WEIGHT_RTOL, (a, b, distance)
        later = numbers_apart(losses[a][1:], losses[b][1:], "losses", rtol=LOSS_RTOL, atol=0.0)
        assert len(later) == len(losses[a]) - 1, (a, b, later)  # every step after the first apart
    nudged = load(weights[tune[0]])
    for _ in range(4):  # four ulps up, every element
        nudged = {k: torch.nextafter(v, torch.full_like(v, math.inf)) for k, v in nudged.items()}
    distance, problems = weights_apart(weights[tune[0]], save(nudged))
    assert not problems and 0 < distance <= WEIGHT_RTOL / 100, distance


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
    tuned = lock.tuned
    assert tuned.var == "TATU_LR" and tuned.selected_on.startswith("sftHeld dev half")
    manifest = json.loads((world["data"] / "manifest.json").read_text())
    held = world["data"] / manifest["evals"]["sftHeld"]["file"]
    dev = {m.values["TATU_LR"]: _naive_dev_ppl(Path(m.env["TATU_OUT"]) / m.run / "final", held)
           for m in lock.members_of("tune")}
    assert tuned.value == min(dev, key=dev.get), (dev, tuned)
    # The comparison members run with the chosen value; the report shows both stages.
    assert all(m.env["TATU_LR"] == tuned.value for m in lock.members_of("compare"))
    proc = subprocess.run([sys.executable, "-m", "tatu.ops.cli", "sweep", "report", "tuned", "--sweeps", str(reference.parent)],
                          env=clean_environ(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "tune stage: TATU_LR" in out and f"TATU_LR={tuned.value} <- chosen" in out
    assert "comparison stage (sftHeld: judge half)" in out and "Holm over 1 comparisons" in out
    assert "VERDICT (locked rule): " in out
    for name in ("index.html", "report.json", "drift_vs_axis.png", "tradeoff.png"):
        assert (reference / "report" / name).stat().st_size > 0
    assert assert_every_p_agrees_with_its_ci(json.loads((reference / "report" / "report.json").read_text())) >= 2


def test_report_drift_is_the_daemons_drift(reference):
    """The re-scored start/end per-line sums give back the drift the daemon logged at its last eval."""
    from tatu.sweep.judge.analysis import member_result
    from tatu.sweep.judge.stats import run_lines

    for m in read_lock(reference).members_of("compare"):
        result = member_result(m, reference)
        assert math.expm1(run_lines(result, "enRuler").log_ratio()) == pytest.approx(result.evals.daemon_drift, abs=1e-9)


def test_each_member_names_its_own_env_file_where_it_says_what_its_cis_cover(reference):
    """The foreground backend writes each member's variables to env/<run>.env and hands the daemon
    that path: the covers wording names a file that exists and holds the member's configuration."""
    for m in read_lock(reference).members_of("compare"):
        covers = json.loads((Path(m.env["TATU_OUT"]) / m.run / "verdict.json").read_text())["ci_covers"]
        env_file = reference / "env" / f"{m.run}.env"
        assert covers["env_file"] == str(env_file), covers
        # a member's run-to-run variation is its sweep's to show: the text points to the sweep's report
        assert f"tatu sweep report {reference.name} --sweeps {reference.parent}" in covers["text"], covers
        assert "--seeds 3" not in covers["text"]
        assert parse_env_file(env_file).items() >= m.env.items()


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
    assert "TATU_SEQ_LEN=256 from [env] exceeds the seed's block_size 192" in stop["reason"]
    assert str(sweep_dir / "logs" / "replay-n0-seq-len256-s1.out") in stop["reason"]  # the line names its log
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
            member = read_lock(sweep_dir).members_of()[0]
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

"""The training daemon end to end on a tiny model (CPU, seconds each).

Runs go through `python -m tatu.daemon` in a subprocess where the process boundary matters
(exit codes, SIGKILL) and in-process elsewhere. The configuration's own checks are
tests/daemon/test_config.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tb_reader import assert_curves_equal_events, read_back, require_tensorboard
from tiny_world import RUN_PREFIXES, clean_environ, daemon, sft_env

from tatu.daemon.logs import read_events
from tatu.daemon.run.lock import holder_pid
from tatu.daemon.main import main as daemon_main
from tatu.model.checkpoint import load_checkpoint

EVAL_RE = re.compile(r"EVAL [0-9]+: sftHeld")


def history(run_dir: Path) -> list[dict]:
    """Eval records as stored in the resume state, without wall-clock fields."""
    saved = json.loads((run_dir / "state" / "resume.json").read_text())["history"]
    return [{k: v for k, v in h.items() if k not in ("seconds", "line")} for h in saved]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- where a run starts from ------------------------------------------------------------------

def test_tokenizer_mismatch_exits_78_naming_both(tiny_trunk, tmp_path):
    from tatu.model.checkpoint import save_checkpoint
    from tatu.model.tokenizer import CharTokenizer

    seed = load_checkpoint(tiny_trunk["trunk"])
    other = CharTokenizer([chr(0x4E00 + i) for i in range(len(seed.tokenizer.chars))])  # same size, other tokens
    bad = tmp_path / "bad-seed"
    save_checkpoint(bad, model_state=seed.model_state, model_config=seed.model_config, tokenizer=other, meta={})
    proc = daemon(sft_env(tiny_trunk, tmp_path / "out", TATU_SEED_CKPT=bad))
    assert proc.returncode == 78
    assert "tokenizer mismatch" in proc.stdout + proc.stderr and other.hash[:12] in proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()


# --- a normal run ------------------------------------------------------------------------------

def test_run_prints_config_evals_and_baseline_drift_zero(tiny_trunk, tmp_path):
    proc = daemon(sft_env(tiny_trunk, tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"REPLAY_N\s+= 1\s+\[env\]", proc.stdout)
    assert re.search(r"MIX_FORGET_LIMIT\s+= 0.1\s+\[default\]", proc.stdout)
    log = (tmp_path / "run" / "run.log").read_text()
    eval_lines = [line for line in log.splitlines() if EVAL_RE.search(line)]
    assert [int(re.search(r"EVAL (\d+):", line).group(1)) for line in eval_lines] == [0, 3, 6]
    assert "EVAL 0: sftHeld" in eval_lines[0] and "drift +0.0%" in eval_lines[0]
    assert re.search(r"drift_tronco [+-]\d+\.\d%", eval_lines[1])  # the trunk's reference travelled with the seed
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    events = read_events(tmp_path / "run" / "events.jsonl")
    # This run (seeded, CPU) improves sftHeld beyond its CI and never drifts past the limit: the
    # verdict's own rule, applied to the logged numbers, says "holds", and so does the verdict.
    evals = [e for e in events if e["event"] == "eval"]
    assert evals[-1]["changes"]["sftHeld"]["hi"] < 0
    assert all(e["drift"]["value"] <= 0.1 for e in evals)
    assert verdict["verdict"] == "holds"
    assert verdict["numbers"]["sftHeld_change"] == evals[-1]["changes"]["sftHeld"]
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 6
    for e in steps:  # the replay fraction reported is the one counted in the step
        assert e["replay_fraction"] == pytest.approx(e["tokens"]["replay"] / (e["tokens"]["replay"] + e["tokens"]["sft"]))
    # config travels with every checkpoint
    for name in ("best", "final", "state"):
        assert load_checkpoint(tmp_path / "run" / name).meta["config"]["REPLAY_N"] == 1


def test_thread_count_and_sum_order_are_printed_with_their_sources_and_kept_in_every_checkpoint(tiny_trunk, tmp_path):
    # CPU float sums follow the thread count, so a run says which it computed with: TATU_THREADS
    # wins over the OMP_NUM_THREADS a launcher (Ray, torchrun) sets; unset, the launcher's count is
    # kept, and named. Likewise MKL's sum order, as MKL reports it: strict unless the environment
    # says otherwise (an empty value is unset).
    fixed = daemon({**sft_env(tiny_trunk, tmp_path / "fixed", MIX_STEPS_LIMIT=2), "TATU_THREADS": "2",
                    "OMP_NUM_THREADS": "1", "MKL_CBWR": ""})
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert re.search(r"TATU_THREADS\s+= 2\s+\[env\]", fixed.stdout)
    assert "torch threads: 2 (TATU_THREADS)" in fixed.stdout
    assert "CPU matmul sums: MKL_CBWR=AUTO,STRICT (tatu's default)" in fixed.stdout
    for name in ("best", "final", "state"):
        meta = load_checkpoint(tmp_path / "fixed" / "run" / name).meta
        assert (meta["threads"], meta["mkl_cbwr"]) == (2, "AUTO,STRICT")
    launcher = daemon({**sft_env(tiny_trunk, tmp_path / "omp", MIX_STEPS_LIMIT=2), "OMP_NUM_THREADS": "1",
                       "MKL_CBWR": "COMPATIBLE"})
    assert launcher.returncode == 0, launcher.stdout + launcher.stderr
    assert "torch threads: 1 (OMP_NUM_THREADS=1)" in launcher.stdout
    assert "CPU matmul sums: MKL_CBWR=COMPATIBLE (env)" in launcher.stdout
    meta = load_checkpoint(tmp_path / "omp" / "run" / "final").meta
    assert (meta["threads"], meta["mkl_cbwr"]) == (1, "COMPATIBLE")


def test_drift_tronco_is_na_without_a_trunk_reference(tiny_trunk, tmp_path):
    from tatu.model.checkpoint import save_checkpoint

    seed = load_checkpoint(tiny_trunk["trunk"])
    bare = tmp_path / "bare-seed"
    save_checkpoint(bare, model_state=seed.model_state, model_config=seed.model_config, tokenizer=seed.tokenizer, meta={})
    assert daemon_main(sft_env(tiny_trunk, tmp_path / "out", TATU_SEED_CKPT=bare, MIX_STEPS_LIMIT=3)) == 0
    log = (tmp_path / "out" / "run" / "run.log").read_text()
    assert "drift_tronco n/a" in log and "drift_tronco +0.0%" not in log


def test_planted_forgetting_aborts_with_10(tiny_trunk, tmp_path):
    env = sft_env(tiny_trunk, tmp_path, REPLAY_N=0, TATU_LR="3e-2", MIX_FORGET_LIMIT="0.02", MIX_STEPS_LIMIT=30,
                  EVAL_EVERY=2, TATU_GRAD_CLIP=0)
    proc = daemon(env)
    assert proc.returncode == 10, proc.stdout[-2000:] + proc.stderr[-2000:]
    events = read_events(tmp_path / "run" / "events.jsonl")
    abort = [e for e in events if e["event"] == "abort"]
    assert abort and "MIX_FORGET_LIMIT" in abort[-1]["reason"]
    last_eval = [e for e in events if e["event"] == "eval"][-1]
    assert last_eval["drift"]["value"] > 0.02 and last_eval["abort"]
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["verdict"] == "forgets"
    assert load_checkpoint(tmp_path / "run" / "state").extra_json["resume"]["step"] == last_eval["step"]
    # an abort is final: a restart exits 10 again and trains nothing (a looser limit would be a
    # changed configuration, refused with 78)
    steps_before = sum(1 for e in events if e["event"] == "step")
    again = daemon(env)
    assert again.returncode == 10 and "was aborted at step" in again.stdout + again.stderr
    assert sum(1 for e in read_events(tmp_path / "run" / "events.jsonl") if e["event"] == "step") == steps_before


def test_ci_abort_mode_aborts_on_the_lower_bound(tiny_trunk, tmp_path):
    """MIX_FORGET_CI=1 through the daemon: the abort names the CI's lower bound, at the first eval
    where it exceeds the limit. (That it waits while only the point estimate is over: test_decisions.)"""
    env = sft_env(tiny_trunk, tmp_path, REPLAY_N=0, TATU_LR="3e-2", MIX_FORGET_LIMIT="0.02", MIX_STEPS_LIMIT=30,
                  EVAL_EVERY=2, TATU_GRAD_CLIP=0, MIX_FORGET_CI=1)
    proc = daemon(env)
    assert proc.returncode == 10, proc.stdout[-2000:] + proc.stderr[-2000:]
    events = read_events(tmp_path / "run" / "events.jsonl")
    evals = [e for e in events if e["event"] == "eval"]
    assert all(e["drift"]["lo"] <= 0.02 for e in evals[:-1]) and evals[-1]["drift"]["lo"] > 0.02
    (abort,) = [e for e in events if e["event"] == "abort"]
    assert abort["step"] == evals[-1]["step"] and abort["reason"].startswith("drift CI lower bound")
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["verdict"] == "forgets"


def test_injected_nan_exits_11_and_previous_state_loads(tiny_trunk, tmp_path):
    proc = daemon(sft_env(tiny_trunk, tmp_path, TATU_FAULT_NAN_STEP=5, TATU_CKPT_EVERY=3))
    assert proc.returncode == 11, proc.stdout[-2000:] + proc.stderr[-2000:]
    state = load_checkpoint(tmp_path / "run" / "state")
    assert state.extra_json["resume"]["step"] == 3
    model = state.build_model()
    assert all(p.isfinite().all() for p in model.parameters())
    # and the run resumes from it (the fault is a test switch; without it the run completes)
    proc = daemon(sft_env(tiny_trunk, tmp_path))
    assert proc.returncode == 0 and "resumed from step 3" in proc.stdout


def test_best_follows_sftheld_not_the_ruler(tiny_trunk, tmp_path):
    env = sft_env(tiny_trunk, tmp_path, REPLAY_N=0, TATU_LR="1e-2", MIX_STEPS_LIMIT=12, EVAL_EVERY=2, MIX_FORGET_LIMIT=1)
    assert daemon_main(env) == 0
    evals = {e["step"]: e for e in read_events(tmp_path / "run" / "events.jsonl") if e["event"] == "eval"}
    best_so_far = float("inf")
    for step in sorted(evals):
        ppl = evals[step]["sets"]["sftHeld"]["ppl"]
        assert evals[step]["best"] == (ppl < best_so_far)
        best_so_far = min(best_so_far, ppl)
    best_step = min(evals, key=lambda s: evals[s]["sets"]["sftHeld"]["ppl"])
    assert load_checkpoint(tmp_path / "run" / "best").meta["best"]["step"] == best_step
    # the planted setting (no replay, high LR) makes the ruler worse where sftHeld is best:
    # a choice by the ruler would have kept step 0
    assert evals[best_step]["sets"]["enRuler"]["ppl"] > evals[0]["sets"]["enRuler"]["ppl"]
    assert best_step != min(evals, key=lambda s: evals[s]["sets"]["enRuler"]["ppl"])


def test_smoke_leaves_the_real_run_untouched(tiny_trunk, tmp_path):
    from tatu.ops.cli import main as tatu

    env = sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=4)
    assert daemon_main(env) == 0
    real = tmp_path / "run"
    before = {p: sha(p) for p in real.rglob("*") if p.is_file()}
    env_file = tmp_path / "run.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    saved = dict(os.environ)
    try:
        for k in list(os.environ):
            if k.startswith(RUN_PREFIXES):
                del os.environ[k]
        assert tatu(["smoke", "--env-file", str(env_file)]) == 0
    finally:
        os.environ.clear()
        os.environ.update(saved)
    smoke_log = (tmp_path / "run-smoke" / "run.log").read_text()
    assert [int(m) for m in re.findall(r"EVAL (\d+): sftHeld", smoke_log)] == [0, 1, 2]
    assert {p: sha(p) for p in real.rglob("*") if p.is_file()} == before


# --- restarts ---------------------------------------------------------------------------------

@pytest.mark.parametrize("change", [{"TATU_LR": "5e-3"}, {"TATU_N_LAYER": "2"}, {"REPLAY_N": "2"},
                                    {"TATU_PRECISION": "bf16"}])
def test_restart_with_another_config_is_refused(tiny_trunk, tmp_path, change):
    assert daemon_main(sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=3)) == 0
    proc = daemon(sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=6, **change))
    assert proc.returncode == 78, proc.stdout[-1500:] + proc.stderr[-1500:]
    (name,) = change
    assert name in proc.stdout + proc.stderr and "start a new TATU_RUN" in proc.stdout + proc.stderr


def test_restarting_a_finished_run_reports_ready_and_exits_0(tiny_trunk, tmp_path):
    """Under Type=notify an exit before READY is a failed start that systemd would restart."""
    import socket as socketlib

    env = sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=2, EVAL_EVERY=2)
    assert daemon_main(env) == 0
    notify = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(30)
    proc = daemon({**env, "NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    assert proc.returncode == 0 and "already finished" in proc.stdout
    messages = []
    notify.setblocking(False)
    while True:
        try:
            messages.append(notify.recv(4096).decode())
        except BlockingIOError:
            break
    assert "READY=1" in messages
    assert not any(m.startswith("WATCHDOG=1") for m in messages)  # no step ran: no progress to report


def test_restart_keeps_the_baseline(tiny_trunk, tmp_path):
    env = sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=3)
    assert daemon_main(env) == 0
    baseline = json.loads((tmp_path / "run" / "state" / "resume.json").read_text())["baseline"]
    env = sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=6)  # continue the same run further
    proc = daemon(env)
    assert proc.returncode == 0 and "resumed from step 3" in proc.stdout
    assert "EVAL 0:" not in proc.stdout  # the baseline is never recomputed
    assert json.loads((tmp_path / "run" / "state" / "resume.json").read_text())["baseline"] == baseline


# A frozen trunk (the tiny seed has one block: top:1 freezes the embeddings and the tied head) and
# LoRA adapters with their own dropout (one more RNG draw per step that a resume must restore).
PARTIAL = {"all": {}, "top:1": {"TATU_TRAIN": "top:1"},
           "lora": {"TATU_TRAIN": "lora", "TATU_LORA_RANK": "4", "TATU_LORA_DROPOUT": "0.1"}}


# The retention terms (daemon/retention/): the seed's weights, the Fisher file and the frozen teacher
# must come back as they were, and the Fisher must not be estimated again.
SEED_TERMS = {"l2sp": {"TATU_ANCHOR": "l2sp", "TATU_ANCHOR_WEIGHT": "100"},
              "ewc": {"TATU_ANCHOR": "ewc", "TATU_ANCHOR_WEIGHT": "100", "TATU_EWC_BATCHES": "4"},
              "distill": {"TATU_DISTILL": "1", "TATU_DISTILL_WEIGHT": "0.5"}}
# A cosine with warmup: the learning rate a resumed step uses comes from the step and the curve's end
# its state stored, so a resume that lost either would leave other weights behind.
SCHEDULES = {"cosine": {"TATU_SCHEDULE": "cosine", "TATU_WARMUP_STEPS": "4", "TATU_MIN_LR": "1e-5"}}
# Replay from two sources (tatu.data.replay): a resume that gave a source another's position, or a
# schedule that forgot what each had drawn, would train on other lines.
SOURCES = {"sources": {"REPLAY_SOURCES": "replay:1/3,pretrain:2/3"}}


@pytest.mark.slow
@pytest.mark.parametrize("train,precision,n_kills,steps",
                         [(train, "fp32", 5, 24) for train in PARTIAL] + [("all", "bf16", 2, 12)]
                         + [(variant, "fp32", 3, 16) for variant in (*SEED_TERMS, *SCHEDULES, *SOURCES)])
def test_sigkill_at_random_moments_then_resume_is_bit_identical(tiny_trunk, tmp_path, train, precision, n_kills, steps):
    """bf16 (explicit, so it runs on any CPU: emulated where it is not native) with fewer kills:
    what it adds is that the resume is exact within a bf16 run, not more moments to strike."""
    # A checkpoint every step, so a good share of the run is spent writing state.
    settings = dict(MIX_STEPS_LIMIT=steps, EVAL_EVERY=4, TATU_CKPT_EVERY=1, TATU_DROPOUT="0.1", TATU_PRECISION=precision,
                    **{**PARTIAL, **SEED_TERMS, **SCHEDULES, **SOURCES}[train])
    reference = tmp_path / "reference"
    assert daemon(sft_env(tiny_trunk, reference, **settings)).returncode == 0

    killed = tmp_path / "killed"
    run_dir = killed / "run"
    env = {**clean_environ(), **sft_env(tiny_trunk, killed, **settings)}
    rng = random.Random(1234)

    def writing(pid: int) -> bool:
        return (run_dir / f".state.tmp-{pid}").exists()

    def steps_done() -> int:
        events = run_dir / "events.jsonl"
        return max((e["step"] for e in read_events(events) if e["event"] == "step"), default=0) if events.is_file() else 0

    # The moments are drawn in steps, not seconds, so a fast machine strikes as often as a slow one:
    # a kill lands a random few ms after a random step (up to 5 past the last one), or, every other
    # kill, in the middle of a state write. 3 x 5 + 2 x 2 steps at most (1 x 5 + 1 x 2 for 2 kills): the
    # run never finishes first.
    kills, during_write = 0, 0
    for attempt in range(40):
        if kills == n_kills:
            break
        aim_at_write = kills % 2 == 1
        target = steps_done() + rng.randint(1, 5)
        after = rng.uniform(0.0, 0.05)
        proc = subprocess.Popen([sys.executable, "-m", "tatu.daemon"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        hit = False
        while proc.poll() is None and time.monotonic() < deadline:
            if aim_at_write and writing(proc.pid):
                hit = True
                break
            if not aim_at_write and steps_done() >= target:
                time.sleep(after)
                break
            time.sleep(0.001)  # a state write lasts milliseconds: this still sees it, and leaves the CPU to the run
        if proc.poll() is not None:  # finished before we struck: start the kill series over
            assert proc.returncode == 0
            shutil.rmtree(killed)
            kills = during_write = 0
            continue
        if hit or steps_done() >= target:  # mid-run, the daemon holds its run dir; the kill frees it
            assert holder_pid(run_dir) == proc.pid
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        during_write += hit
    assert kills == n_kills and during_write >= 1, (kills, during_write)
    final = daemon(sft_env(tiny_trunk, killed, **settings))
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-2000:]
    assert sha(run_dir / "final" / "model.safetensors") == sha(reference / "run" / "final" / "model.safetensors")
    if train == "lora":
        assert sha(run_dir / "final" / "adapter.safetensors") == sha(reference / "run" / "final" / "adapter.safetensors")
    assert history(run_dir) == history(reference / "run")
    assert load_checkpoint(run_dir / "final").meta["precision"] == precision
    require_tensorboard()  # the TensorBoard curves, killed mid-record too: each step once, events.jsonl's numbers
    assert_curves_equal_events(read_back(run_dir / "tb"), read_events(run_dir / "events.jsonl"))
    assert [step for step, _ in read_back(run_dir / "tb").scalars["train/loss"]] == list(range(1, steps + 1))


def test_subsampled_ruler_is_explicit(tiny_trunk, tmp_path):
    """EVAL_EN_ALL=0: the ruler is scored on EVAL_EN_BATCHES x EVAL_BATCH lines, and says so."""
    proc = daemon(sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=1, EVAL_EVERY=1, EVAL_EN_ALL=0))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "enRuler_lines=16/40" in proc.stdout
    assert re.search(r"enRuler: scored 16/40 lines \(EVAL_EN_ALL=0\); the SE of its ppl is \d+\.\d%", proc.stdout)
    first = [e for e in read_events(tmp_path / "run" / "events.jsonl") if e["event"] == "eval"][0]
    assert first["sets"]["enRuler"]["n_lines"] == 16 and first["sets"]["enRuler"]["n_lines_total"] == 40

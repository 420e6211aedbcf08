"""One run on two processes: torchrun (through tatu.daemon.launch) with the gloo backend on CPU.

Real torchrun, real process groups, real signals. Every launch here starts two ranks on this
machine's two cores; the launches shared by several tests are module fixtures. OMP_NUM_THREADS=1
for the single-process twin too (torchrun sets it for its workers): the same kernels, so the
comparison measures the split of the step, not a different thread count.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch

from tb_reader import assert_curves_equal_events, read_back, require_tensorboard
from tiny_world import base_env, clean_environ, wait_for

from tatu.daemon.control.server import socket_path
from tatu.daemon.distributed import share
from tatu.daemon.launch import run_exit_code
from tatu.daemon.logs import read_events
from tatu.model.checkpoint import load_checkpoint

LIMIT, EVAL_EVERY, CKPT_EVERY = 24, 8, 4


def env_for(extra: dict[str, str]) -> dict[str, str]:
    return {**clean_environ(), **extra, "OMP_NUM_THREADS": "1"}


def single(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tatu.daemon"], env=env_for(env), capture_output=True,
                          text=True, timeout=300)


def launcher_args(nproc: int) -> list[str]:
    return [sys.executable, "-m", "tatu.daemon.launch", f"--nproc-per-node={nproc}", "--monitor-interval=0.2"]


def launch(env: dict[str, str], nproc: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run(launcher_args(nproc), env=env_for(env), capture_output=True, text=True, timeout=300)


def start_launch(env: dict[str, str], log: Path, nproc: int = 2) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(launcher_args(nproc), env=env_for(env), stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_trunk):
    """The session's tiny trunk and data; this module's runs under a root of its own."""
    return {**tiny_trunk, "root": tmp_path_factory.mktemp("ddp-world")}


def sft_env(world, run: str, **extra) -> dict[str, str]:
    # SFT_GE 2 + REPLAY_N 1 = 3 micro-batches on 2 ranks: unequal shares (2 and 1) on purpose.
    settings = dict(TATU_RUN=run, TATU_SEED_CKPT=world["trunk"], SFT_GE=2, REPLAY_N=1, MIX_STEPS_LIMIT=LIMIT,
                    EVAL_EVERY=EVAL_EVERY, TATU_LR="1e-3", TATU_CKPT_EVERY=CKPT_EVERY)
    settings.update(extra)
    return base_env(world["data"], world["root"] / "runs", **settings)


def resume_json(run_dir: Path) -> dict:
    return json.loads((run_dir / "state" / "resume.json").read_text())


def evals_without_clock(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in h.items() if k not in ("seconds", "line", "generations")}
            for h in resume_json(run_dir)["history"]]


def max_weight_difference(a: Path, b: Path) -> float:
    sa, sb = load_checkpoint(a).model_state, load_checkpoint(b).model_state
    assert sa.keys() == sb.keys()
    return max(float((sa[k].double() - sb[k].double()).abs().max()) for k in sa)


def close(a, b, tol: float, path: str = "") -> None:
    """Every number in two JSON trees within `tol` (relative to 1), everything else equal."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            close(a[k], b[k], tol, f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, tol, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, (int, float)):
        assert abs(a - b) <= tol * max(1.0, abs(a)), f"{path}: {a} vs {b}"
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


# --- pure parts ------------------------------------------------------------------------------

def test_shares_partition_the_step_in_order():
    for n in range(1, 12):
        for size in range(1, n + 1):
            blocks = [share(n, size, rank) for rank in range(size)]
            assert [i for b in blocks for i in b] == list(range(n))
            assert max(map(len, blocks)) - min(map(len, blocks)) <= 1
            assert all(len(b) >= 1 for b in blocks)
    assert [list(share(3, 2, r)) for r in range(2)] == [[0, 1], [2]]


def test_launcher_exit_code_prefers_rank0s_run_code_then_any_ranks_then_the_first_failure():
    def failure(code, at):
        return SimpleNamespace(exitcode=code, timestamp=at)

    assert run_exit_code({0: failure(10, 5), 1: failure(1, 1)}) == 10  # rank 0's decision wins
    assert run_exit_code({0: failure(65, 5)}) == 65
    assert run_exit_code({0: failure(1, 5), 1: failure(-9, 1)}) == 128 + 9  # the first failure: a SIGKILL
    assert run_exit_code({1: failure(78, 1)}) == 78
    # rank 1 found bad data (65) and rank 0, its gloo mesh cut, died with 1, stamped first: a race the
    # suite once lost (tests/daemon/test_ddp.py::test_bad_data_ends_every_rank_with_65 exited 1)
    assert run_exit_code({0: failure(1, 1), 1: failure(65, 5)}) == 65
    assert run_exit_code({0: failure(0, 2), 1: failure(-15, 1)}) == 128 + 15  # never 0 when a rank failed
    # rank 0's contract code wins over an earlier rank's (its decision, not the first stamped)
    assert run_exit_code({0: failure(10, 5), 1: failure(65, 1)}) == 10
    # an exit 0 stamped after a rank that failed with no contract code: the failure's code, never 0
    # (nor the 1 a cleanly exited rank counts as)
    assert run_exit_code({1: failure(-9, 1), 0: failure(0, 3)}) == 128 + 9
    assert run_exit_code({0: failure(0, 1), 1: failure(-9, 3)}) == 1  # an exit 0 stamped first counts as 1
    # two ranks with contract codes, rank 0 without: the earliest stamped, whatever the dict's order
    assert run_exit_code({0: failure(1, 9), 2: failure(78, 4), 1: failure(65, 2)}) == 65


def test_model_and_evals_never_import_torch_distributed():
    """They stay usable from a notebook: the daemon hands the eval sharding in as a callable."""
    root = Path(__file__).resolve().parents[2]
    sources = [p for folder in ("model", "evals") for p in (root / folder).rglob("*.py")]
    assert len(sources) >= 5
    offending = [str(p.relative_to(root)) for p in sources if "torch.distributed" in p.read_text()
                 or "from torch import distributed" in p.read_text()]
    assert offending == []
    assert "torch.distributed" in (root / "daemon" / "distributed.py").read_text()  # the scan can see it


# --- two ranks against one -------------------------------------------------------------------

@pytest.fixture(scope="module")
def twins(world):
    """The same run on one process and on two ranks."""
    one = single(sft_env(world, "one"))
    assert one.returncode == 0, one.stdout + one.stderr
    two = launch(sft_env(world, "two"))
    assert two.returncode == 0, two.stdout + two.stderr
    runs = world["root"] / "runs"
    return {"one": runs / "one", "two": runs / "two", "proc": two}


@pytest.mark.slow
def test_two_ranks_take_the_single_process_steps(twins):
    difference = max_weight_difference(twins["one"] / "final", twins["two"] / "final")
    print(f"max |w_1rank - w_2ranks| = {difference:.3g}")
    assert difference <= 1e-6
    # The evals at every step: every number (ppl, CIs, drift, p-values) to 1e-9.
    one, two = evals_without_clock(twins["one"]), evals_without_clock(twins["two"])
    assert [h["step"] for h in one] == [0, 8, 16, 24]
    close(one, two, 1e-9)
    # Each step's loss and token counts, as rank 0 logged them for the whole step.
    steps = [[{k: e[k] for k in ("step", "tokens", "replay_fraction")} | {"loss": round(e["loss"], 9)}
              for e in read_events(run / "events.jsonl") if e["event"] == "step"] for run in (twins["one"], twins["two"])]
    assert steps[0] == steps[1] and len(steps[1]) == LIMIT


# A realistic split: SFT_GE 4 + REPLAY_N 2 = 6 micro-batches, 3 on each rank, so every rank sums
# several micro-batches' gradients before the all-reduce, in another order than one process does.
BUSY = dict(SFT_GE=4, REPLAY_N=2, MIX_STEPS_LIMIT=8, EVAL_EVERY=4, TATU_CKPT_EVERY=8)
# What docs/operations.md promises for such a split: the final weights within this of the 1-rank
# twin's (float32 summation order: measured 1.4e-5 here after 8 steps, 2 of 16 tensors identical),
# every EVAL line identical to its printed digits.
BUSY_WEIGHT_BOUND = 1e-3


def printed_evals(run_dir: Path) -> list[str]:
    """The run's EVAL lines as run.log holds them, without the wall-clock seconds."""
    lines = [line[line.index("EVAL "):] for line in (run_dir / "run.log").read_text().splitlines() if re.search(r"EVAL [0-9]+: ", line)]
    return [re.sub(r" \([0-9.]+s\)", "", line) for line in lines]


@pytest.fixture(scope="module")
def busy_twins(world):
    one = single(sft_env(world, "busy-one", **BUSY))
    assert one.returncode == 0, one.stdout + one.stderr
    two = launch(sft_env(world, "busy-two", **BUSY))
    assert two.returncode == 0, two.stdout + two.stderr
    runs = world["root"] / "runs"
    return {"one": runs / "busy-one", "two": runs / "busy-two"}


@pytest.mark.slow
def test_several_micro_batches_per_rank_end_within_the_documented_bound(busy_twins):
    difference = max_weight_difference(busy_twins["one"] / "final", busy_twins["two"] / "final")
    print(f"3 micro-batches per rank: max |w_1rank - w_2ranks| = {difference:.3g}")
    assert difference <= BUSY_WEIGHT_BOUND
    one, two = printed_evals(busy_twins["one"]), printed_evals(busy_twins["two"])
    assert [line.split(":")[0] for line in one] == ["EVAL 0", "EVAL 4", "EVAL 8"]
    assert one == two


@pytest.mark.slow
def test_two_ranks_take_the_single_process_steps_in_bf16(world):
    """TATU_PRECISION=bf16 (explicit: emulated on a CPU without native bf16): the autocast is per
    micro-batch and the gradients stay fp32, so the split of the step still changes nothing."""
    extra = dict(TATU_PRECISION="bf16", MIX_STEPS_LIMIT=6, EVAL_EVERY=6, TATU_CKPT_EVERY=6, TATU_GEN_PROMPTS=0)
    one = single(sft_env(world, "one-bf16", **extra))
    assert one.returncode == 0, one.stdout + one.stderr
    two = launch(sft_env(world, "two-bf16", **extra))
    assert two.returncode == 0, two.stdout + two.stderr
    runs = world["root"] / "runs"
    assert "precision bf16 [env: TATU_PRECISION=bf16" in two.stdout
    difference = max_weight_difference(runs / "one-bf16" / "final", runs / "two-bf16" / "final")
    print(f"bf16: max |w_1rank - w_2ranks| = {difference:.3g}")
    assert difference <= 1e-6
    close(evals_without_clock(runs / "one-bf16"), evals_without_clock(runs / "two-bf16"), 1e-9)
    assert load_checkpoint(runs / "two-bf16" / "final").meta["precision"] == "bf16"


@pytest.mark.slow
def test_sharded_eval_scores_every_line_as_one_process_does(twins):
    # The baseline: same weights, so the per-line sums gathered from two ranks must be the very
    # numbers one process computes.
    one, two = resume_json(twins["one"])["baseline"], resume_json(twins["two"])["baseline"]
    assert one.keys() == two.keys() == {"sftHeld", "ptVal", "enRuler"}
    for name in one:
        assert one[name]["lines"] == two[name]["lines"], name
        assert len(two[name]["lines"]["nll_sum"]) == two[name]["n_lines_total"]
        close(one[name], two[name], 1e-9, name)


@pytest.mark.slow
def test_rank0_alone_writes_and_every_rank_state_is_saved(twins):
    run = twins["two"]
    events = read_events(run / "events.jsonl")
    assert [e["event"] for e in events].count("ready") == 1  # not one per rank
    assert len([e for e in events if e["event"] == "eval"]) == 4
    assert sorted(p.name for p in run.iterdir() if not p.name.startswith(".") and p.name != "tb") == sorted(
        ["best", "events.jsonl", "final", "run.log", "state", "verdict.json"])
    saved = resume_json(run)
    assert saved["ranks"]["world_size"] == 2
    assert [s["rank"] for s in saved["ranks"]["states"]] == [1]
    assert saved["ranks"]["states"][0]["stream"] == saved["stream"]
    assert (run / "state" / "rng_rank1.safetensors").is_file()
    assert "2 ranks (torchrun)" in twins["proc"].stdout
    assert "ranks" not in resume_json(twins["one"])  # a single process's state is as before
    require_tensorboard()
    assert len(list((run / "tb").iterdir())) == 1  # one event file: one writer, rank 0
    assert_curves_equal_events(read_back(run / "tb"), events)  # each point once, as events.jsonl has it


@pytest.mark.slow
def test_restart_on_another_world_size_is_refused(world, twins):
    proc = single(sft_env(world, "two", MIX_STEPS_LIMIT=LIMIT + 4))
    assert proc.returncode == 78, proc.stdout + proc.stderr
    assert "saved by 2 rank(s) and is restarted on 1" in proc.stdout + proc.stderr
    assert resume_json(twins["two"])["step"] == LIMIT  # untouched


def saved_steps(run_dir: Path) -> list[int]:
    path = run_dir / "events.jsonl"
    return [e["step"] for e in read_events(path) if e["event"] == "checkpoint"] if path.exists() else []


def worker_pids(launcher: subprocess.Popen) -> dict[int, int]:
    """rank -> pid of the launcher's workers (torchrun puts RANK in each one's environment)."""
    ranks = {}
    for child in psutil.Process(launcher.pid).children():
        try:
            ranks[int(child.environ()["RANK"])] = child.pid
        except (psutil.NoSuchProcess, KeyError):
            continue  # a child gone since listed, or one torchrun started that is not a rank: not a worker
    return ranks


@pytest.mark.slow
def test_one_rank_killed_then_relaunched_ends_equal_to_the_uninterrupted_run(world, twins, tmp_path):
    env = sft_env(world, "killed")
    run = world["root"] / "runs" / "killed"
    launcher = start_launch(env, tmp_path / "first.log")
    try:
        wait_for(lambda: [s for s in saved_steps(run) if s >= CKPT_EVERY], 120, "a scheduled save")
        os.kill(worker_pids(launcher)[1], signal.SIGKILL)
        code = launcher.wait(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    log = (tmp_path / "first.log").read_text()
    assert code not in (0, 10, 11, 65, 78), log  # a crash: systemd restarts it
    assert "rank 1: exit -9" in log
    killed_at = resume_json(run)["step"]
    assert CKPT_EVERY <= killed_at < LIMIT, "the kill came after the run had finished: nothing was resumed"
    again = launch(env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resumed from step {killed_at}" in again.stdout
    assert max_weight_difference(run / "final", twins["two"] / "final") == 0.0  # bit-identical
    assert evals_without_clock(run) == evals_without_clock(twins["two"])


@pytest.mark.slow
def test_sigterm_stops_every_rank_at_one_boundary_exit_0_and_resumes(world, twins, tmp_path):
    env = sft_env(world, "stopped", MIX_STEPS_LIMIT=100_000)
    run = world["root"] / "runs" / "stopped"
    launcher = start_launch(env, tmp_path / "first.log")
    try:
        wait_for(lambda: [s for s in saved_steps(run) if s >= CKPT_EVERY], 120, "a scheduled save")
        launcher.send_signal(signal.SIGTERM)  # what systemd's KillMode=mixed sends: the launcher only
        code = launcher.wait(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    log = (tmp_path / "first.log").read_text()
    assert code == 0, log
    events = read_events(run / "events.jsonl")
    stopped_at = resume_json(run)["step"]
    assert events[-1]["event"] == "checkpoint" and events[-1]["reason"] == "stop"
    assert events[-1]["step"] == stopped_at == max(e["step"] for e in events if e["event"] == "step")
    # Resumed with the twins' limit, a stop past it could not end as they did.
    assert stopped_at < LIMIT, f"the stop landed at step {stopped_at}, past the twins' {LIMIT}: a slow signal relay?"
    saved = resume_json(run)
    assert saved["ranks"]["states"][0]["stream"] == saved["stream"]  # rank 1 stopped at the same step
    again = launch({**env, "MIX_STEPS_LIMIT": str(LIMIT)})
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resumed from step {stopped_at}" in again.stdout
    # Stopped and resumed at any step, the run is the uninterrupted one.
    assert max_weight_difference(run / "final", twins["two"] / "final") == 0.0


@pytest.mark.slow
def test_forget_abort_on_two_ranks_exits_10_from_the_launcher(world):
    env = sft_env(world, "forget", REPLAY_N=0, TATU_LR="3e-2", MIX_FORGET_LIMIT="0.02", MIX_STEPS_LIMIT=30,
                  EVAL_EVERY=2, TATU_GRAD_CLIP=0)
    proc = launch(env)
    assert proc.returncode == 10, proc.stdout + proc.stderr
    assert "ABORT at step" in proc.stdout  # rank 0's log...
    assert "rank 1: ERROR: ABORT at step" in proc.stderr  # ...and rank 1 reached the same decision itself
    verdict = json.loads((world["root"] / "runs" / "forget" / "verdict.json").read_text())
    assert verdict["verdict"] == "forgets"
    # What plain torchrun makes of the same: exit 1, which systemd would restart.
    plain = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "-m", "tatu.daemon"],
                           env=env_for(env), capture_output=True, text=True, timeout=300)
    assert plain.returncode == 1
    assert "aborted at step" in plain.stdout  # the restart refused training past the abort: rank 0 said why


@pytest.mark.slow
def test_rank0_alone_failing_ends_every_rank_with_its_code(world, tmp_path):
    """The run's socket is taken (another daemon): rank 0 exits 75 (the run is already running)
    before any collective; rank 1 must not hang and the launcher must say 75, not torchrun's 1."""
    env = sft_env(world, "taken")
    path = socket_path("taken")
    path.parent.mkdir(parents=True, exist_ok=True)
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        squatter.bind(str(path))
        squatter.listen(1)
        proc = launch(env)
    finally:
        squatter.close()
        path.unlink(missing_ok=True)
    assert proc.returncode == 75, proc.stdout + proc.stderr
    assert "already listening" in proc.stdout + proc.stderr


def test_more_ranks_than_micro_batches_is_refused(world, monkeypatch):
    from tatu.daemon.config import ConfigError, load_config
    from tatu.daemon.distributed import join

    config, _ = load_config(sft_env(world, "crowded", SFT_GE=1, REPLAY_N=0))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ConfigError, match="WORLD_SIZE=2 exceeds the 1 micro-batches"):
        join(config, torch.device("cpu"))  # before any process group: nothing waits for the others
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert join(config, torch.device("cpu"))[0].distributed is False  # torchrun --nproc-per-node=1: a single process


@pytest.mark.slow
def test_bad_data_ends_every_rank_with_65(world, twins):
    """A corrupted resume state: every rank refuses it (65), and so does the launcher."""
    import shutil

    run = world["root"] / "runs" / "corrupt"
    shutil.copytree(twins["two"], run)
    weights = run / "state" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    proc = launch(sft_env(world, "corrupt", MIX_STEPS_LIMIT=LIMIT + 4))
    assert proc.returncode == 65, proc.stdout + proc.stderr
    assert "resume state" in proc.stdout + proc.stderr


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_two_launchers_as_two_machines_make_one_run(world, twins, tmp_path):
    """--nnodes=2 with a c10d rendezvous, both "machines" on this host, one rank each: the same
    run as two ranks under one launcher."""
    args = ["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
            "--rdzv-id=nodes", "--monitor-interval=0.2"]
    env = env_for(sft_env(world, "nodes"))
    nodes = []
    for i in range(2):
        with open(tmp_path / f"node{i}.log", "wb") as out:
            nodes.append(subprocess.Popen([sys.executable, "-m", "tatu.daemon.launch", *args], env=env, stdout=out,
                                          stderr=subprocess.STDOUT))
    try:
        codes = [node.wait(timeout=300) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    logs = [(tmp_path / f"node{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0], logs
    assert sum("2 ranks (torchrun)" in log for log in logs) == 1  # one of them holds rank 0 and logs
    run = world["root"] / "runs" / "nodes"
    assert max_weight_difference(run / "final", twins["two"] / "final") == 0.0
    assert evals_without_clock(run) == evals_without_clock(twins["two"])


# --- partial training on two ranks ----------------------------------------------------------

# The tiny seed has one block: top:1 freezes wte/wpe (and the tied head); lora freezes every base weight.
PARTIAL = {"top:1": {"TATU_TRAIN": "top:1"}, "lora": {"TATU_TRAIN": "lora", "TATU_LORA_RANK": "2"}}
# The retention terms on the weights that train under top:1: the penalty counted once whatever the ranks
# (it is added after the all-reduce, on every rank alike), the seed's logits per rank's micro-batches.
TOP1 = PARTIAL["top:1"]
PARTIAL.update({"top:1+l2sp": {**TOP1, "TATU_ANCHOR": "l2sp", "TATU_ANCHOR_WEIGHT": "100"},
                "top:1+ewc": {**TOP1, "TATU_ANCHOR": "ewc", "TATU_ANCHOR_WEIGHT": "100", "TATU_EWC_BATCHES": "4"},
                "top:1+distill": {**TOP1, "TATU_DISTILL": "1", "TATU_DISTILL_WEIGHT": "0.5"}})
PARTIAL_LIMIT = 8


@pytest.fixture(scope="module", params=list(PARTIAL))
def partial_twins(world, request):
    name = request.param.replace(":", "").replace("+", "-")
    settings = dict(MIX_STEPS_LIMIT=PARTIAL_LIMIT, EVAL_EVERY=4, TATU_CKPT_EVERY=2, **PARTIAL[request.param])
    one = single(sft_env(world, f"one-{name}", **settings))
    assert one.returncode == 0, one.stdout + one.stderr
    two = launch(sft_env(world, f"two-{name}", **settings))
    assert two.returncode == 0, two.stdout + two.stderr
    runs = world["root"] / "runs"
    return {"train": request.param, "settings": settings, "name": name, "proc": two,
            "one": runs / f"one-{name}", "two": runs / f"two-{name}"}


@pytest.mark.slow
def test_two_ranks_equal_one_with_frozen_weights_and_reduce_only_what_trains(partial_twins):
    one, two = partial_twins["one"], partial_twins["two"]
    assert max_weight_difference(one / "final", two / "final") <= 1e-6
    if partial_twins["train"] == "lora":
        a, b = load_checkpoint(one / "final").extra_tensors["adapter"], load_checkpoint(two / "final").extra_tensors["adapter"]
        assert a.keys() == b.keys() and max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    close(evals_without_clock(one), evals_without_clock(two), 1e-9)
    # DDP's own count of what it all-reduces: the trained tensors (float32), nothing frozen
    trained = json.loads((two / "final" / "meta.json").read_text())["trainable"]
    assert f"all-reduce per step: {trained['tensors']} tensors, {4 * trained['trainable']} bytes" in partial_twins["proc"].stdout
    assert trained["trainable"] < trained["base"]
    assert "unused parameters" not in partial_twins["proc"].stdout + partial_twins["proc"].stderr


@pytest.mark.slow
def test_a_partial_run_with_a_rank_killed_then_relaunched_ends_bit_identical(world, partial_twins, tmp_path):
    name = partial_twins["name"]
    env = sft_env(world, f"killed-{name}", **partial_twins["settings"])
    run = world["root"] / "runs" / f"killed-{name}"
    launcher = start_launch(env, tmp_path / "first.log")
    try:
        wait_for(lambda: [s for s in saved_steps(run) if s >= 2], 120, "a scheduled save")
        os.kill(worker_pids(launcher)[1], signal.SIGKILL)
        code = launcher.wait(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert code not in (0, 10, 11, 65, 78), (tmp_path / "first.log").read_text()
    killed_at = resume_json(run)["step"]
    assert 2 <= killed_at < PARTIAL_LIMIT, "the kill came after the run had finished: nothing was resumed"
    again = launch(env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resumed from step {killed_at}" in again.stdout
    assert max_weight_difference(run / "final", partial_twins["two"] / "final") == 0.0
    assert evals_without_clock(run) == evals_without_clock(partial_twins["two"])

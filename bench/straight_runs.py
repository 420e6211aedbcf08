"""The straight-run difference (issue 28, docs/operations.md "CPU matmul sums"): a loop of short,
never-interrupted runs of one configuration at torch's default thread count, beside other
processes, each hashed after every sub-operation of its first optimizer updates, so a run that ends
apart from its twins points at the first operation, tensor and elements that differ.

    nice -n 10 .venv/bin/python -u bench/straight_runs.py --out /tmp/straight --runs 500 --per-process 8 --parallel 3 --busy 1
    nice -n 10 .venv/bin/python -u bench/straight_runs.py --out /tmp/straight-daemon --world /tmp/straight/world --daemon --per-process 1 --runs 200
    .venv/bin/python bench/straight_runs.py --out /tmp/straight --summary
    .venv/bin/python bench/straight_runs.py --out /tmp/straight-var --world /tmp/straight/world --variants

A run is the killed-sweep test's member (tests/sweep_world.py: TATU_LR=3e-3, seed 1, 2 x 192 tokens
per micro-batch, 2 micro-batches a step) on the tests' tiny world (tests/tiny_world.py: data and a
24-step trunk, built once under OUT/world or --world), 3 steps, no TATU_THREADS (torch's default, 2
on a 2-core machine). By default a run is the daemon's own setup and steps without its evals, saves
and log (`trainer_run`: configuration, threads, MKL's mode, start point, stream, Trainer); with
--daemon it is a whole daemon run in the process (`tatu.daemon.main.main`, shortened: one eval at
the end, no generation). The product code is not touched: the run wraps
`torch.nn.utils.clip_grad_norm_` (which the Trainer looks up at each call) and registers global
optimizer step pre/post hooks. Before each of the first STEPS updates the pre hook clones the
parameters, gradients and Adam state and applies an instrumented copy of torch's single-tensor
AdamW to the clones, hashing each op's result (weight-decay mul, exp_avg lerp, exp_avg_sq mul,
addcmul, sqrt, div, add eps, addcdiv); the post hook checks that torch's own update gave the same
bits (`matches_torch`), so the copy is the product's math, checked in every run. The clip wrapper
hashes the gradients, the per-tensor norms, the total norm and the clipped gradients. Per step it
also probes the floating-point state of the main thread and of the intra-op team (a denormal times 1
stays denormal unless DAZ/FTZ is on) and whether a parallel sum had a team of the run's size.

Every run appends one line to OUT/runs.jsonl (final weights' sha256, the digest of every step's
hashes, the probes). The first run to finish is the reference; a run that differs keeps its full
hashes and its per-op tensors (OUT/differ/RUN.json and RUN.pt) and the loop prints the first
differing op, the tensor, how many elements and how many ulps. Runs that match delete theirs.
`--variants` computes the update's ops also at 1 thread, at 2 and with denormals flushed, says which
ops' bits each changes, and which variant a differing run's first differing op equals.
STRAIGHT_MKL_THREADS / STRAIGHT_MKL_DYNAMIC in the environment set MKL's own count / dynamic flag.

`--per-process R` (4): each process does R runs one after another (torch's imports, half a run's
time here, are paid once); the first of each is a fresh process's, and runs.jsonl says which.
`--busy K` starts K fresh busy loops just before every other process (one captured case started
beside freshly started busy loops), for its first 10 s. `--parallel P` processes at once.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

STEPS = 3  # updates instrumented: the captured case was apart after update 1
# The killed-sweep test's member (tests/sweep_world.py plan_text, tune stage, TATU_LR=3e-3, seed 1):
# the same model, data, batches and update, cut to what fits 500 runs in an hour on 2 shared cores
# (3 steps, one resume state, the smallest eval, no generation): the difference is in the update.
MEMBER = {"TATU_DEVICE": "cpu", "TATU_PRECISION": "fp32", "TATU_MICRO_BATCH": "2", "TATU_SEQ_LEN": "192",
          "TATU_EVAL_RESAMPLES": "100", "TATU_MEM_FLOOR_MB": "0", "TATU_GEN_PROMPTS": "0",
          "EVAL_EN_ALL": "0", "EVAL_EN_BATCHES": "1", "EVAL_BATCH": "2",
          "SFT_GE": "2", "REPLAY_N": "0", "MIX_STEPS_LIMIT": "3", "EVAL_EVERY": "3", "TATU_CKPT_EVERY": "3",
          "TATU_LR": "3e-3", "TATU_SEED": "1"}


def build_world(world: Path) -> dict:
    """WORLD (OUT/world unless --world): the tests' tiny data and trunk (conftest.py's tiny_trunk), built once."""
    info = world / "world.json"
    if info.exists():
        return json.loads(info.read_text())
    from tiny_world import base_env, build_world as build

    from tatu.daemon.main import main as daemon_main

    world.mkdir(parents=True, exist_ok=True)
    data = build(world)
    env = base_env(data, world / "runs", TATU_RUN="trunk", TATU_MODE="pretrain", SFT_GE=2, MIX_STEPS_LIMIT=24,
                   EVAL_EVERY=12, TATU_LR="3e-3", TATU_GEN_PROMPTS=0)
    assert daemon_main(env) == 0
    got = {"data": str(data.absolute()), "trunk": str((world / "runs" / "trunk" / "final").absolute())}
    info.write_text(json.dumps(got))
    return got


def member_env(world: dict, out: Path, run: str) -> dict[str, str]:
    from tiny_world import base_env, clean_environ

    env = base_env(Path(world["data"]), out, TATU_RUN=run, TATU_SEED_CKPT=world["trunk"], **MEMBER)
    env.update({k: v for k, v in os.environ.items() if k.startswith("STRAIGHT_")})
    env.pop("TATU_THREADS", None)
    return {**clean_environ(), **env}


# ---------------------------------------------------------------- the child: one instrumented run

def _h(t) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()[:16]


class Recorder:
    def __init__(self, variants: dict | None = None):
        import torch

        self.variants = variants or {}
        self.torch = torch
        self.step = 0  # optimizer updates seen
        self.hashes: dict[str, str] = {}
        self.tensors: dict[str, object] = {}
        self.probes: list[dict] = []
        self.matches_torch: list[bool] = []
        self.expected: list | None = None
        self.names: dict[int, str] = {}
        # Reference values of the probes, once at start: a parallel sum at 1 and at 2 threads.
        g = torch.Generator().manual_seed(0)
        self.probe_x = torch.rand(1 << 18, generator=g) * 1e-3 + torch.rand(1 << 18, generator=g)
        n = torch.get_num_threads()
        self.team_values = {}
        for k in sorted({1, n}):
            torch.set_num_threads(k)
            self.team_values[k] = self.probe_x.sum().item()
        torch.set_num_threads(n)

    def keep(self, key: str, t) -> None:
        self.hashes[key] = _h(t)
        self.tensors[key] = t.detach().clone()

    def probe(self) -> dict:
        torch = self.torch
        tiny = torch.full((8,), 1e-39)  # a float32 denormal; serial op in this thread
        main_daz = (tiny * 1.0).eq(0).any().item()
        big = torch.full((1 << 17,), 1e-39)  # past the grain size: split over the team
        team_daz = int((big * 1.0).eq(0).sum().item())
        total = self.probe_x.sum().item()
        team = [k for k, v in self.team_values.items() if v == total]
        return {"step": self.step, "threads": torch.get_num_threads(), "main_daz": bool(main_daz),
                "team_daz_elems": team_daz, "sum_like_threads": team,
                "team_values_differ": len(set(self.team_values.values())) > 1}

    # clip_grad_norm_ as torch does it (foreach norms, then the norm of the norms), hashed
    def clip(self, original):
        rec = self

        def clip_grad_norm_(parameters, max_norm, *args, **kwargs):
            torch = rec.torch
            params = list(parameters)
            on = rec.step < STEPS
            if on:
                s = f"s{rec.step + 1}"
                grads = [p.grad for p in params if p.grad is not None]
                for i, g in enumerate(grads):
                    rec.keep(f"{s}/clip/grad_in/{i}", g)
                norms = torch._foreach_norm(grads, 2.0)
                for i, n in enumerate(norms):
                    rec.keep(f"{s}/clip/norm/{i}", n)
                rec.keep(f"{s}/clip/total_norm", torch.linalg.vector_norm(torch.stack(norms), 2.0))
                for name, during in rec.variants.items():
                    with during():
                        vn = torch._foreach_norm(grads, 2.0)
                        for i, n in enumerate(vn):
                            rec.hashes[f"{name}|{s}/clip/norm/{i}"] = _h(n)
                        rec.hashes[f"{name}|{s}/clip/total_norm"] = _h(torch.linalg.vector_norm(torch.stack(vn), 2.0))
            total = original(params, max_norm, *args, **kwargs)
            if on:
                rec.keep(f"{s}/clip/total_norm_torch", total)
                for i, g in enumerate([p.grad for p in params if p.grad is not None]):
                    rec.keep(f"{s}/clip/grad_out/{i}", g)
            return total

        return clip_grad_norm_

    def pre(self, optimizer, args, kwargs):
        if self.step >= STEPS:
            return
        self.probes.append(self.probe())
        self.expected = []
        s = f"s{self.step + 1}"
        k = 0
        for group in optimizer.param_groups:
            if group.get("foreach") or group.get("fused") or group.get("amsgrad") or group.get("maximize"):
                raise SystemExit(f"not the single-tensor AdamW path: {dict((a, group.get(a)) for a in ('foreach', 'fused', 'amsgrad', 'maximize'))}")
            lr, (beta1, beta2), wd, eps = group["lr"], group["betas"], group["weight_decay"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                key = f"{s}/p{k}"
                k += 1
                st = optimizer.state.get(p, {})
                self.keep(f"{key}/grad", p.grad)
                inputs = (p.detach(), p.grad.detach(), st.get("exp_avg"), st.get("exp_avg_sq"),
                          (float(st["step"]) if "step" in st else 0.0) + 1, lr, beta1, beta2, wd, eps)
                param = adamw_chain(*inputs, lambda op, t: self.keep(f"{key}/{op}", t))
                for name, during in self.variants.items():
                    with during():
                        adamw_chain(*inputs, lambda op, t: self.hashes.__setitem__(f"{name}|{key}/{op}", _h(t)))
                self.expected.append((p, param))

    def post(self, optimizer, args, kwargs):
        if self.expected is None:
            return
        s = f"s{self.step + 1}"
        same = all(self.torch.equal(p.detach(), want) for p, want in self.expected)
        for k, (p, _) in enumerate(self.expected):
            self.keep(f"{s}/p{k}/torch_result", p)
        self.matches_torch.append(same)
        self.expected = None
        self.step += 1


def adamw_chain(p, g, exp_avg, exp_avg_sq, step, lr, beta1, beta2, wd, eps, keep):
    """torch/optim/adam.py's _single_tensor_adam for one parameter (decoupled weight decay, no
    amsgrad, not maximize, not capturable), on clones, calling keep(op, tensor) after every op;
    returns the new parameter."""
    import torch

    param = p.clone()
    grad = g.clone()
    exp_avg = exp_avg.clone() if exp_avg is not None else torch.zeros_like(param, memory_format=torch.preserve_format)
    exp_avg_sq = exp_avg_sq.clone() if exp_avg_sq is not None else torch.zeros_like(param, memory_format=torch.preserve_format)
    if wd != 0:
        param.mul_(1 - lr * wd)
        keep("1_decay_mul", param)
    exp_avg.lerp_(grad, 1 - beta1)
    keep("2_exp_avg_lerp", exp_avg)
    exp_avg_sq.mul_(beta2)
    keep("3_exp_avg_sq_mul", exp_avg_sq)
    exp_avg_sq.addcmul_(grad, grad, value=1 - beta2)
    keep("4_exp_avg_sq_addcmul", exp_avg_sq)
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    step_size = lr / bias_correction1
    bias_correction2_sqrt = bias_correction2 ** 0.5
    root = exp_avg_sq.sqrt()
    keep("5_sqrt", root)
    denom = root / bias_correction2_sqrt
    keep("6_div", denom)
    denom.add_(eps)
    keep("7_add_eps", denom)
    param.addcdiv_(exp_avg, denom, value=-step_size)
    keep("8_addcdiv", param)
    return param


def threads(n: int):
    """A context: torch's intra-op team at n threads for the ops inside."""
    from contextlib import contextmanager

    import torch

    @contextmanager
    def during():
        was = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(was)
    return during


def flushed():
    """A context: denormals flushed to zero (FTZ and DAZ in this thread's MXCSR) for the ops inside."""
    from contextlib import contextmanager

    import torch

    @contextmanager
    def during():
        torch.set_flush_denormal(True)
        try:
            yield
        finally:
            torch.set_flush_denormal(False)
    return during


def mkl_threads(count: str | None, dynamic: str | None) -> None:
    """Hypothesis (b): MKL's own thread count apart from torch's team. STRAIGHT_MKL_THREADS=N sets
    MKL's count alone (torch.set_num_threads sets both), STRAIGHT_MKL_DYNAMIC=0/1 its dynamic flag,
    through the service functions libtorch_cpu exports (it links oneMKL statically)."""
    if count is None and dynamic is None:
        return
    import ctypes

    import torch

    lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    if count is not None:
        lib.mkl_serv_set_num_threads(ctypes.c_int(int(count)))
    if dynamic is not None:
        lib.mkl_serv_set_dynamic(ctypes.c_int(int(dynamic)))


def trainer_run(env: dict[str, str]) -> tuple[int, str]:
    """The daemon's own setup and steps without its evals, saves and log (tatu.daemon.loop._run's
    order: threads, MKL's mode, the start point, the stream, the Trainer), STEPS steps; (0, the
    sha256 of the final weights in state_dict order)."""
    import torch

    from tatu.daemon.main import configure
    from tatu.daemon.start import starting_point
    from tatu.data.manifest import load_manifest
    from tatu.data.stream import MixedStream
    from tatu.daemon.trainer import Trainer
    from tatu.model import cpu_sums
    from tatu.model.device import set_threads

    config, _ = configure([("env", env)], None, False)
    set_threads(config.threads)
    cpu_sums.settle()
    mkl_threads(os.environ.get("STRAIGHT_MKL_THREADS"), os.environ.get("STRAIGHT_MKL_DYNAMIC"))
    start = starting_point(config, load_manifest(config.data))
    stream = MixedStream(config.data, mix=config.mix, micro_batch=config.micro_batch, seq_len=config.seq_len,
                         seed=config.seed, tokenizer_hash=start.tokenizer.hash)
    trainer = Trainer(config, start.gpt_config, torch.device("cpu"), start.weights, start.weights_source)
    for step in range(1, STEPS + 1):
        trainer.step(stream.next_step(), step)
    digest = hashlib.sha256()
    for name, t in trainer.model.state_dict().items():
        digest.update(name.encode() + t.detach().contiguous().numpy().tobytes())
    return 0, digest.hexdigest()


def child(out: Path, runs: list[str], world: dict, results: Path, variants: dict | None = None,
          trainer_only: bool = False) -> None:
    """The runs one after another in this process (the first pays torch's imports, the rest do not),
    each a whole daemon run in its own run directory; results/RUN.json and RUN.pt for each."""
    env = member_env(world, out, runs[0])
    os.environ.clear()
    os.environ.update(env)
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    from tatu.daemon.main import main as daemon_main

    current: list[Recorder] = []
    original = torch.nn.utils.clip_grad_norm_
    torch.nn.utils.clip_grad_norm_ = lambda *a, **k: current[0].clip(original)(*a, **k)
    register_optimizer_step_pre_hook(lambda *a: current[0].pre(*a))
    register_optimizer_step_post_hook(lambda *a: current[0].post(*a))
    for nth, run in enumerate(runs):
        rec = Recorder({"t1": threads(1), "t2": threads(2), "ftz": flushed()} if variants else None)
        current[:] = [rec]
        env = member_env(world, out, run)
        started = time.time()
        if trainer_only:
            rc, final_sha = trainer_run(env)
        else:
            rc = daemon_main(env)
            final = Path(env["TATU_OUT"]) / run / "final" / "model.safetensors"
            final_sha = hashlib.sha256(final.read_bytes()).hexdigest() if final.exists() else None
        line = {"run": run, "nth_in_process": nth, "rc": rc, "pid": os.getpid(), "seconds": round(time.time() - started, 2),
                "threads": torch.get_num_threads(), "final_sha256": final_sha,
                "matches_torch": rec.matches_torch, "probes": rec.probes,
                "step_digest": {f"s{i}": hashlib.sha256(json.dumps({k: v for k, v in sorted(rec.hashes.items()) if k.startswith(f"s{i}/")}).encode()).hexdigest()[:16]
                                for i in range(1, STEPS + 1)},
                "hashes": rec.hashes}
        torch.save(rec.tensors, results / f"{run}.pt")
        (results / f"{run}.json").write_text(json.dumps(line))


def variants(out: Path, world: dict) -> None:
    """One run (in this process) whose clip norms and AdamW ops are also computed under each
    variant; which ops' bits a variant changes, and which variant a differing run's first
    differing op equals."""
    out.mkdir(parents=True, exist_ok=True)
    run = f"variants{os.getpid()}"
    child(out / "runs", [run], world, out, variants=True)
    got = json.loads((out / f"{run}.json").read_text())
    base = {k: v for k, v in got["hashes"].items() if "|" not in k}
    print(f"threads {got['threads']}, torch's update = the instrumented copy's: {got['matches_torch']}")
    for name in ("t1", "t2", "ftz"):
        changed = [k for k, v in got["hashes"].items() if k.startswith(name + "|") and base.get(k.split("|", 1)[1]) != v]
        print(f"{name}: {len(changed)} of {sum(k.startswith(name + '|') for k in got['hashes'])} op results change"
              + (f", first: {changed[:6]}" if changed else ""))
    log = out / "runs.jsonl"
    for line in (log.read_text().splitlines() if log.exists() else []):
        x = json.loads(line)
        if x.get("first_difference") and (out / "differ" / f"{x['run']}.json").exists():
            odd = json.loads((out / "differ" / f"{x['run']}.json").read_text())
            key = x["first_difference"]
            same = [name for name in ("t1", "t2", "ftz") if got["hashes"].get(f"{name}|{key}") == odd["hashes"][key]]
            print(f"{x['run']}: first difference {key} equals the variant(s) {same or 'none'}")


# ---------------------------------------------------------------- the parent: the loop

def first_difference(ref: dict, got: dict) -> str | None:
    """The first op (in step, then execution order) whose hash differs, or None."""
    order = list(ref["hashes"])  # insertion order is execution order
    for key in order:
        if got["hashes"].get(key) != ref["hashes"][key]:
            return key
    return None


def describe(out: Path, ref_name: str, got_name: str, key: str) -> str:
    """How the first differing tensor differs: elements, ulps, denormals in the inputs."""
    import torch

    a = torch.load(out / "differ" / f"{ref_name}.pt")[key]
    b = torch.load(out / "differ" / f"{got_name}.pt")[key]
    diff = (a != b)
    n = int(diff.sum())
    idx = diff.flatten().nonzero().flatten()[:8].tolist()
    ia, ib = a.flatten().view(torch.int32), b.flatten().view(torch.int32)
    ulps = (ia.long() - ib.long()).abs()[diff.flatten()]
    tiny = torch.finfo(torch.float32).tiny
    denorm = int(((a.abs() < tiny) & (a != 0)).flatten()[diff.flatten()].sum())
    return (f"{key}: {n}/{a.numel()} elements differ (first at {idx}), max {int(ulps.max()) if n else 0} ulps, "
            f"{denorm} of them denormal in the reference")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/straight"))
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--busy", type=int, default=2, help="busy loops started before every other run")
    ap.add_argument("--world", type=Path, help="the tiny world to use (default OUT/world, built if missing)")
    ap.add_argument("--per-process", type=int, default=4,
                    help="runs one after another in each process (the first in each is a fresh process's)")
    ap.add_argument("--daemon", action="store_true",
                    help="whole daemon runs (evals, saves, log; about 4x the time) instead of the Trainer's steps")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--variants", action="store_true",
                    help="one run whose updates are also computed at 1 thread, at 2, and with denormals flushed; "
                         "prints which ops' bits each changes, and whether OUT's differing runs equal one")
    ap.add_argument("--child", nargs=2, metavar=("RUNS", "RESULTS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = args.out.absolute()
    world_dir = (args.world or out / "world").absolute()
    if args.child:
        child(out / "runs", args.child[0].split(","), build_world(world_dir), Path(args.child[1]), trainer_only=not args.daemon)
        return
    if args.variants:
        variants(out, build_world(world_dir))
        return
    if args.summary:
        summary(out)
        return
    out.mkdir(parents=True, exist_ok=True)
    build_world(world_dir)
    (out / "differ").mkdir(exist_ok=True)
    log = out / "runs.jsonl"
    done = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    ref = None
    if done:
        ref = json.loads((out / "differ" / f"{done[0]['run']}.json").read_text())
    n = max((int(x["run"][1:]) for x in done), default=-1) + 1  # a killed loop's unfinished runs are skipped
    running: list = []
    # SIGTERM ends the loop, its processes and their busy loops (which sit in sessions of their own)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        while n < args.runs or running:
            while n < args.runs and len(running) < args.parallel:
                runs = [f"r{i:05d}" for i in range(n, min(n + args.per_process, args.runs))]
                # busy loops started just before every other process, for its start and first run
                # (10 s): the machine is shared, and longer loops would halve the loop's own pace
                with_busy = [subprocess.Popen(["timeout", "10", "sh", "-c", "while :; do :; done"], start_new_session=True)
                             for _ in range(args.busy)] if args.busy and (n // args.per_process) % 2 == 1 else []
                results = out / "results"
                results.mkdir(exist_ok=True)
                proc = subprocess.Popen([sys.executable, "-u", __file__, "--out", str(out), "--world", str(world_dir),
                                         "--child", ",".join(runs), str(results)] + (["--daemon"] if args.daemon else []),
                                        stdout=open(results / f"{runs[0]}.log", "w"), stderr=subprocess.STDOUT)
                running.append((runs, proc, with_busy))
                n += len(runs)
            time.sleep(0.2)
            for item in list(running):
                runs, proc, with_busy = item
                if proc.poll() is None:
                    continue
                running.remove(item)
                for b in with_busy:
                    os.killpg(b.pid, signal.SIGKILL)
                    b.wait()
                for run in runs:
                    res = results / f"{run}.json"
                    if not res.exists():
                        line = {"run": run, "rc": proc.returncode, "error": f"no result (see results/{runs[0]}.log)"}
                        print(json.dumps(line), flush=True)
                        with log.open("a") as f:
                            f.write(json.dumps(line) + "\n")
                        continue
                    got = json.loads(res.read_text())
                    keep = ref is None
                    where = None
                    if ref is None:
                        ref = got
                    else:
                        where = first_difference(ref, got)
                        keep = where is not None or got["final_sha256"] != ref["final_sha256"] or not all(got["matches_torch"])
                    if keep:
                        res.rename(out / "differ" / f"{run}.json")
                        res.with_suffix(".pt").rename(out / "differ" / f"{run}.pt")
                    else:
                        res.unlink()
                        res.with_suffix(".pt").unlink()
                        shutil.rmtree(out / "runs" / run, ignore_errors=True)
                    line = {"run": run, "nth_in_process": got["nth_in_process"], "rc": got["rc"], "busy": bool(with_busy),
                            "seconds": got["seconds"], "threads": got["threads"],
                            "final_sha256": got["final_sha256"][:16] if got["final_sha256"] else None,
                            "same_as_ref": got["final_sha256"] == ref["final_sha256"] and where is None,
                            "first_difference": where, "matches_torch": got["matches_torch"],
                            "probes": [{k: p[k] for k in ("main_daz", "team_daz_elems", "sum_like_threads")} for p in got["probes"]]}
                    if where is not None:
                        line["detail"] = describe(out, ref["run"], run, where)
                    with log.open("a") as f:
                        f.write(json.dumps(line) + "\n")
                    if not line["same_as_ref"] or not all(got["matches_torch"]) or int(run[1:]) % 25 == 0:
                        print(json.dumps(line), flush=True)
                if not any((out / "differ" / f"{r}.json").exists() for r in runs):
                    (results / f"{runs[0]}.log").unlink(missing_ok=True)
    finally:
        for _, proc, with_busy in running:
            proc.kill()
            for b in with_busy:
                os.killpg(b.pid, signal.SIGKILL)
    summary(out)


def summary(out: Path) -> None:
    lines = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    ok = [x for x in lines if "error" not in x]
    differ = [x for x in ok if not x["same_as_ref"]]
    odd_probe = [x for x in ok if any(p["main_daz"] or p["team_daz_elems"] for p in x["probes"])]
    first = [x for x in ok if x.get("nth_in_process", 0) == 0]
    other_team = [x for x in ok if any(p["sum_like_threads"] != [x["threads"]] for p in x["probes"])]
    print(f"{len(other_team)} runs where a step's probe sum was not that of a team of the run's thread count")
    print(f"{len(ok)} runs ({len(first)} the first of a fresh process, {sum(x['busy'] for x in ok)} in a process started beside a fresh busy loop; "
          f"{len(lines) - len(ok)} failed to report), {len(differ)} apart from the first run "
          f"({sum(x.get('nth_in_process', 0) == 0 for x in differ)} of them first in their process), "
          f"{sum(not all(x['matches_torch']) for x in ok)} where torch's update was not the instrumented copy's, "
          f"{len(odd_probe)} with DAZ/FTZ seen; final sha256s: {sorted({x['final_sha256'] for x in ok})}")
    for x in differ:
        print(f"  {x['run']}: first difference {x['first_difference']}; {x.get('detail', '')}")


if __name__ == "__main__":
    main()

"""A scale rehearsal: the operator's shape through the real daemon, measured in one run.

Makes its own corpus and eval suite from the demo's sources (`tatu data demo`: Debian packages;
its eval sets are the operator's sizes: ptVal 390 + enRuler 166 + sftHeld 100 = 656 lines),
trains a byte-level BPE of --vocab ids, builds the shards, then:
  1. pretrains the shape (default n_layer 8, n_embd 512, vocab 8192, context 256: ~29M
     parameters) for --steps steps through `python -m tatu.daemon` (a fresh process, as under
     systemd), with one resume-state save in the middle and the eval suite at the end;
  2. runs a bare training loop on the same batches in this process (the daemon's arithmetic,
     autocast included: its losses equal the daemon's);
  3. fine-tunes the trunk for 2 steps (SFT + replay) through the daemon, from its start to READY;
  4. scores the 656-line suite with the naive evaluator (bench/eval.py; CPU only) to set beside
     the daemon's own eval time.
Prints, each line as soon as it is measured: daemon steps/s vs the bare loop (target >= 0.97),
the save's seconds and its share of a TATU_CKPT_EVERY=50 interval, eval seconds vs naive,
start -> READY, peak RSS, MFU (nanoGPT's FLOPs per token vs this device's measured matmul peak in
the run's precision), steps and tokens per hour.

    .venv/bin/python bench/scale.py [--device cpu|cuda] [--precision auto|fp32|bf16] [--steps 24]
        [--n-layer 8 --n-head 8 --n-embd 512 --vocab 8192 --context 256 --micro-batch 8 --sft-ge 2]
        [--compile] [--threads N] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))  # tiny_world's clean_environ

from bare_loop import bare_loop  # noqa: E402
from data_build import peak_rss_of  # noqa: E402
from eval import naive_ppl  # noqa: E402
from tiny_world import clean_environ  # noqa: E402

from tatu.daemon.config import load_config  # noqa: E402
from tatu.daemon.logs import read_events  # noqa: E402
from tatu.daemon.suite import load_suite  # noqa: E402
from tatu.data.manifest import load_manifest  # noqa: E402
from tatu.model.device import resolve_device  # noqa: E402
from tatu.model.gpt import GPT, GPTConfig  # noqa: E402
from tatu.model.hf import load_checkpoint_or_gpt2  # noqa: E402
from tatu.model.precision import resolve_precision  # noqa: E402

TATU = [sys.executable, "-m", "tatu.ops.cli"]


def prepare(work: Path, vocab: int, context: int) -> Path:
    src, tok = work / "sources", work / "tok.json"
    if not (src / "pt_corpus.txt").is_file():
        subprocess.run([*TATU, "data", "demo", str(src)], check=True, stdout=subprocess.DEVNULL)
    if not tok.is_file():
        subprocess.run([*TATU, "tokenizer", "train", "--kind", "bpe", "--vocab", str(vocab), "--out", str(tok),
                        str(src / "pt_corpus.txt"), str(src / "en_corpus.txt"), str(src / "sft_train.jsonl")], check=True)
    data = work / "data"
    subprocess.run([*TATU, "data", "build", "--tokenizer", str(tok), "--out", str(data),
                    "--text", f"pretrain={src / 'pt_corpus.txt'},{src / 'en_corpus.txt'}", "--text",
                    f"replay={src / 'en_corpus.txt'}", "--sft", f"sft={src / 'sft_train.jsonl'}",
                    "--eval", f"sftHeld={src / 'sft_held.jsonl'}", "--eval", f"ptVal={src / 'pt_val.txt'}",
                    "--eval", f"enRuler={src / 'en_ruler.txt'}", "--seq-len", str(context)], check=True)
    return data


def run_env(args, data: Path, out: Path, **extra) -> dict[str, str]:
    env = {"TATU_DATA": str(data), "TATU_OUT": str(out), "TATU_DEVICE": args.device, "TATU_PRECISION": args.precision,
           "TATU_SEED": "3", "TATU_MICRO_BATCH": str(args.micro_batch), "TATU_SEQ_LEN": str(args.context),
           "TATU_BLOCK_SIZE": str(args.context), "TATU_N_LAYER": str(args.n_layer), "TATU_N_HEAD": str(args.n_head),
           "TATU_N_EMBD": str(args.n_embd), "TATU_EVAL_RESAMPLES": "200", "TATU_MEM_FLOOR_MB": "0",
           "TATU_GEN_PROMPTS": "0", "TATU_LR": "1e-3"}
    return {**env, **{k: str(v) for k, v in extra.items()}}


def daemon(env: dict[str, str], threads: int) -> tuple[float, float, float, list[dict]]:
    """(start -> READY seconds, wall seconds, peak RSS MB, events) of `python -m tatu.daemon`."""
    started = time.time()
    runtime = Path(env["TATU_OUT"]).parent / "runtime"  # its own control sockets: two rehearsals never meet
    runtime.mkdir(mode=0o700, exist_ok=True)
    child = {**clean_environ(), **env, "OMP_NUM_THREADS": str(threads), "XDG_RUNTIME_DIR": str(runtime)}
    child.pop("RUNTIME_DIRECTORY", None)
    seconds, rss, proc, _ = peak_rss_of([sys.executable, "-m", "tatu.daemon"], env=child)
    if proc.returncode != 0:
        sys.exit(f"scale: daemon run {env['TATU_RUN']} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    events = read_events(Path(env["TATU_OUT"]) / env["TATU_RUN"] / "events.jsonl")
    ready = next(e["time"] for e in events if e["event"] == "ready")
    return ready - started, seconds, rss, events


def bare_run(env: dict[str, str], steps: int, device: torch.device, compile_model: bool) -> tuple[list[float], list[float]]:
    """(seconds, loss) per step of bench/bare_loop.py's plain loop: a trunk from TATU_SEED, the
    daemon's arithmetic, nothing else."""
    config, _ = load_config(env)
    manifest = load_manifest(config.data)
    torch.manual_seed(config.seed)
    model = GPT(GPTConfig(vocab_size=manifest["vocab_size"], block_size=config.block_size, n_layer=config.n_layer,
                          n_head=config.n_head, n_embd=config.n_embd)).to(device)
    return bare_loop(model, config, steps, device, forward=torch.compile(model) if compile_model else None)


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int = 2048) -> float:
    """FLOP/s of an n x n matmul on `device` in `dtype` (the best of a few timed rounds)."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = 0.0
    for _ in range(4):
        torch.cuda.synchronize() if device.type == "cuda" else None
        started = time.perf_counter()
        for _ in range(3):
            a @ b
        torch.cuda.synchronize() if device.type == "cuda" else None
        best = max(best, 3 * 2 * n ** 3 / (time.perf_counter() - started))
    return best


def nanogpt_flops_per_step(model_config: GPTConfig, n_params: int, tokens_per_step: int) -> float:
    """nanoGPT's estimate_mfu: 6N + 12 L H Q T per token (forward + backward, attention included)."""
    head_dim = model_config.n_embd // model_config.n_head
    per_token = 6 * n_params + 12 * model_config.n_layer * model_config.n_head * head_dim * model_config.block_size
    return per_token * tokens_per_step


def step_gaps(events: list[dict], skip: set[int]) -> list[float]:
    steps = [e for e in events if e["event"] == "step"]
    return [b["time"] - a["time"] for a, b in zip(steps, steps[1:]) if a["step"] not in skip]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in (("--steps", 24), ("--n-layer", 8), ("--n-head", 8), ("--n-embd", 512), ("--vocab", 8192),
                          ("--context", 256), ("--micro-batch", 8), ("--sft-ge", 2), ("--threads", 0)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    parser.add_argument("--compile", action="store_true", help="also a bare-loop row with torch.compile")
    parser.add_argument("--keep", type=Path, default=None, help="work here and keep it (default: a temp dir)")
    args = parser.parse_args()
    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    work = args.keep or Path(tempfile.mkdtemp(prefix="tatu-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        rehearse(args, work, threads)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def say(line: str) -> None:
    print(line, flush=True)  # each measurement as soon as it is made: a slow host still shows the first ones


def rehearse(args, work: Path, threads: int) -> None:
    device = resolve_device(args.device)
    precision = resolve_precision(args.precision, device)
    data = prepare(work, args.vocab, args.context)
    runs = work / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    middle = max(2, args.steps // 2)
    tokens_per_step = args.sft_ge * args.micro_batch * args.context
    trunk_env = run_env(args, data, runs, TATU_RUN="trunk", TATU_MODE="pretrain", SFT_GE=args.sft_ge,
                        MIX_STEPS_LIMIT=args.steps, EVAL_EVERY=args.steps, TATU_CKPT_EVERY=middle)
    say(f"{device}, precision {precision}, {threads} threads, load average {os.getloadavg()[0]:.1f}; "
        f"step = {args.sft_ge} x {args.micro_batch} x {args.context} tokens")
    trunk_ready, trunk_wall, trunk_rss, events = daemon(trunk_env, threads)
    step_time = {e["step"]: e["time"] for e in events if e["event"] == "step"}
    save = next(e["time"] - step_time[e["step"]] for e in events if e["event"] == "checkpoint" and e["step"] == middle)
    step_seconds = statistics.median(step_gaps(events, skip={middle, args.steps}))
    evals = [e for e in events if e["event"] == "eval"]
    # read as the SFT run below reads it (TATU_SEED_CKPT): the entry for every checkpoint a user names
    trunk = load_checkpoint_or_gpt2(runs / "trunk" / "final")
    model = trunk.build_model(device).eval()
    say(f"shape: {model.num_params() / 1e6:.1f}M parameters (n_layer {args.n_layer}, n_embd {args.n_embd}, vocab "
        f"{trunk.tokenizer.vocab_size}, context {args.context})")
    say(f"trunk through the daemon: start -> READY {trunk_ready:.1f} s (the step-0 eval included), "
        f"{args.steps} steps, wall {trunk_wall:.0f} s, peak RSS {trunk_rss:.0f} MB")
    say(f"resume-state save: {save:.2f} s = {save / (50 * step_seconds + save):.2%} of a TATU_CKPT_EVERY=50 interval")
    n_lines = sum(s["n_lines"] for s in evals[-1]["sets"].values())
    say(f"eval of the {n_lines}-line suite in the daemon (fp32): {evals[-1]['seconds']:.1f} s at the last step, "
        f"{evals[0]['seconds']:.1f} s at step 0")

    bare_seconds, bare_losses = bare_run(trunk_env, args.steps, device, compile_model=False)
    bare_step = statistics.median(bare_seconds[1:])
    daemon_losses = [e["loss"] for e in events if e["event"] == "step"]
    same = [round(x, 6) for x in daemon_losses] == [round(x, 6) for x in bare_losses]
    say(f"daemon steps/s vs a bare loop on the same batches: {1 / step_seconds:.4f} vs {1 / bare_step:.4f} = "
        f"{bare_step / step_seconds:.3f} (target >= 0.97); losses equal: {'yes' if same else 'no'}")
    flops = nanogpt_flops_per_step(model.config, model.num_params(), tokens_per_step)
    peak = matmul_peak(device, torch.bfloat16 if precision.name == "bf16" else torch.float32)
    say(f"MFU: {flops / step_seconds / 1e9:.1f} GFLOP/s achieved (nanoGPT's 6N + 12LHQT per token) vs "
        f"{peak / 1e9:.0f} GFLOP/s measured {precision.name} matmul peak = {flops / step_seconds / peak:.1%}")
    say(f"per hour at this step time: {3600 / step_seconds:.0f} steps, {3600 / step_seconds * tokens_per_step / 1e6:.2f}M tokens")
    if args.compile:
        compiled = statistics.median(bare_run(trunk_env, args.steps, device, compile_model=True)[0][1:])
        say(f"bare loop with torch.compile: {1 / compiled:.4f} steps/s ({bare_step / compiled:.2f}x eager)")

    sft_env = run_env(args, data, runs, TATU_RUN="sft", TATU_SEED_CKPT=runs / "trunk" / "final", SFT_GE=args.sft_ge,
                      REPLAY_N=1, MIX_STEPS_LIMIT=2, EVAL_EVERY=2, TATU_CKPT_EVERY=2, MIX_FORGET_LIMIT=1)
    sft_ready, sft_wall, sft_rss, _ = daemon(sft_env, threads)
    say(f"SFT from the trunk through the daemon: start -> READY {sft_ready:.1f} s (its step-0 baseline included), "
        f"wall {sft_wall:.0f} s, peak RSS {sft_rss:.0f} MB")

    if device.type == "cpu":  # bench/eval.py's naive evaluator builds its batches on the CPU
        config, _ = load_config(trunk_env)
        suite = load_suite(config, load_manifest(data), trunk.tokenizer)
        started = time.perf_counter()
        for eval_set in suite.sets.values():
            naive_ppl(model, eval_set.lines)
        naive = time.perf_counter() - started
        say(f"naive evaluator (bench/eval.py: batch 2, mean of batch means) on the same {n_lines} lines: {naive:.1f} s "
            f"= {naive / evals[-1]['seconds']:.2f}x the daemon's eval")


if __name__ == "__main__":
    main()

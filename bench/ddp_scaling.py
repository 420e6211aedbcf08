"""Does one run go faster on N ranks? Training tokens/s of the same run on 1 rank vs N (torchrun + DDP).

The run is the daemon itself (`python -m tatu.daemon.launch --nproc-per-node=K`, the DDP unit's
command), a trunk trained from scratch on the tests' synthetic world, the same configuration for
every K: the same steps, each of SFT_GE micro-batches, split across the ranks. Throughput is
measured from the daemon's own step events: steps after the first --warmup, timed from event to
event (a whole loop iteration: the gradient all-reduce, the boundary agreement and the
bookkeeping included), times the input tokens of a step. Evals run only at step 0 and at the
end, outside the timed steps.

    CPU (gloo):  .venv/bin/python bench/ddp_scaling.py                      # 1 vs 2 ranks, 1 thread each
    GPUs (NCCL): .venv/bin/python bench/ddp_scaling.py --device cuda --nproc 1,4 --n-layer 8 --n-embd 512 \\
                     --seq-len 512 --micro-batch 16 --sft-ge 16 --steps 60

On CPU each rank gets --threads torch threads (default 1), and "1 rank x N threads" is measured too:
on a CPU the fair rival of N ranks is one process using the same cores. Prints ratios; asserts
nothing about timing (exit 0 unless a run fails).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # tiny_world: the synthetic data the daemon tests use

from tiny_world import write_sources  # noqa: E402

from tatu.daemon.logs import read_events  # noqa: E402
from tatu.ops.demo import prepare_data  # noqa: E402


def run_once(args, data: Path, out: Path, nproc: int, threads: int) -> float:
    """Input tokens per second of the timed steps of one run on `nproc` ranks."""
    name = f"r{nproc}x{threads}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SFT_", "REPLAY_", "MIX_", "EVAL_", "TATU_"))}
    env.update({
        "TATU_RUN": name, "TATU_OUT": str(out), "TATU_DATA": str(data), "TATU_MODE": "pretrain",
        "TATU_DEVICE": args.device, "TATU_SEED": "1", "SFT_GE": str(args.sft_ge), "MIX_STEPS_LIMIT": str(args.steps),
        "EVAL_EVERY": str(args.steps), "TATU_CKPT_EVERY": str(args.steps), "TATU_MICRO_BATCH": str(args.micro_batch),
        "TATU_SEQ_LEN": str(args.seq_len), "TATU_BLOCK_SIZE": str(args.seq_len), "TATU_N_LAYER": str(args.n_layer),
        "TATU_N_HEAD": str(args.n_head), "TATU_N_EMBD": str(args.n_embd), "TATU_GEN_PROMPTS": "0",
        "TATU_MEM_FLOOR_MB": "0", "TATU_EVAL_RESAMPLES": "100", "OMP_NUM_THREADS": str(threads),
        "XDG_RUNTIME_DIR": str(out),
    })
    proc = subprocess.run([sys.executable, "-m", "tatu.daemon.launch", f"--nproc-per-node={nproc}"], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"run on {nproc} rank(s) failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    steps = [e for e in read_events(out / name / "events.jsonl") if e["event"] == "step"]
    timed = steps[args.warmup:]
    seconds = timed[-1]["time"] - timed[0]["time"]  # len(timed) - 1 whole iterations
    tokens_per_step = args.sft_ge * args.micro_batch * args.seq_len
    return (len(timed) - 1) * tokens_per_step / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--nproc", default="1,2", help="comma-separated rank counts; the first is the baseline")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank (CPU)")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sft-ge", type=int, default=8, help="micro-batches per step (split across the ranks)")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=128)
    args = parser.parse_args()
    counts = [int(n) for n in args.nproc.split(",")]
    with tempfile.TemporaryDirectory(prefix="tatu-ddp-bench-") as tmp:
        root = Path(tmp)
        data = prepare_data(write_sources(root / "sources"), root, "char", 0, args.seq_len)
        results = {n: run_once(args, data, root / "runs", n, args.threads) for n in counts}
        if args.device == "cpu" and max(counts) > 1:
            same_cores = run_once(args, data, root / "runs", 1, args.threads * max(counts))
    base = results[counts[0]]
    print(f"device {args.device}; model {args.n_layer}x{args.n_embd}, step = {args.sft_ge} x {args.micro_batch} x "
          f"{args.seq_len} tokens; {args.steps} steps, first {args.warmup} untimed")
    for n, rate in results.items():
        print(f"{n} rank(s) x {args.threads} thread(s): {rate:,.0f} tokens/s  ({rate / base:.2f}x of {counts[0]} rank)")
    if args.device == "cpu" and max(counts) > 1:
        n = max(counts)
        print(f"1 rank x {args.threads * n} threads (the same cores, one process): {same_cores:,.0f} tokens/s  "
              f"({same_cores / base:.2f}x); {n} ranks vs it: {results[n] / same_cores:.2f}x")


if __name__ == "__main__":
    main()

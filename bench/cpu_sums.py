"""MKL's strict reproducible sums (tatu's default, model/cpu_sums.py) vs MKL's default order: the
speed of the same training steps.

The demo model, the same batches (bench/bare_loop.py's loop from one seed checkpoint), each run in a
fresh process because MKL fixes its mode at a process's first matmul: A runs with no MKL_CBWR (the
default order), B with MKL_CBWR=AUTO,STRICT. Rounds alternate which goes first. Printed: median
step time of each, the ratio default/strict (steps/s of strict relative to the default), and how far
apart their losses end (the two orders differ in the last bits, so the losses may too).

    .venv/bin/python -u bench/cpu_sums.py [--steps 60 --rounds 3 --threads 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from overhead import DEMO_MODEL, SEQ_LEN, bare_run, build_seed, run_env  # noqa: E402
from tiny_world import write_sources  # noqa: E402

from tatu.model import cpu_sums  # noqa: E402
from tatu.ops.demo import prepare_data  # noqa: E402

MODES = {"default": None, "strict": cpu_sums.MKL_CBWR}


def child(args) -> int:
    """One timed run in this (fresh) process; its numbers as one JSON line."""
    import torch

    torch.set_num_threads(args.threads)
    env = run_env(Path(args.data), Path(args.out), Path(args.seed), "cpu-sums", args.steps, DEMO_MODEL)
    seconds, losses = bare_run(env, args.steps)
    print(json.dumps({"mode": cpu_sums.active_mode(), "median_s": statistics.median(seconds[args.warmup:]),
                      "losses": losses}))
    return 0


def timed(mode: str, args, work: Path, data: Path, seed: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    if MODES[mode]:
        env["MKL_CBWR"] = MODES[mode]
    proc = subprocess.run([sys.executable, __file__, "--child", "--data", str(data), "--seed", str(seed),
                           "--out", str(work / "runs"), "--steps", str(args.steps), "--warmup", str(args.warmup),
                           "--threads", str(args.threads)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"cpu_sums: the {mode} run failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per timed run")
    parser.add_argument("--rounds", type=int, default=3, help="default/strict pairs, alternating which goes first")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (MKL splits sums across them)")
    parser.add_argument("--warmup", type=int, default=5, help="first steps dropped from each run's median")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("--data", "--seed", "--out"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    if args.steps <= args.warmup or args.rounds < 1:
        parser.error("--steps must exceed --warmup, --rounds >= 1")
    print(f"{os.cpu_count()} CPUs, {args.threads} threads; demo model {DEMO_MODEL}, micro-batch 8 x seq {SEQ_LEN}")
    with tempfile.TemporaryDirectory(prefix="tatu-cpu-sums-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        data = prepare_data(write_sources(work / "sources"), work, "char", 0, SEQ_LEN)
        seed = build_seed(work / "seed", work / "tokenizer.json", DEMO_MODEL, 0)
        print(f"data: tiny world, char tokenizer, a fresh demo-size seed ({time.perf_counter() - started:.1f}s)")
        runs: dict[str, list[dict]] = {"default": [], "strict": []}
        for r in range(args.rounds):
            for mode in (("default", "strict") if r % 2 == 0 else ("strict", "default")):
                runs[mode].append(timed(mode, args, work, data, seed))
    modes = {mode: {run["mode"] for run in results} for mode, results in runs.items()}
    print(f"MKL reported: default {sorted(modes['default'])}, strict {sorted(modes['strict'])}")
    median = {mode: statistics.median(run["median_s"] for run in results) for mode, results in runs.items()}
    gap = max(abs(a - b) / abs(a) for a, b in zip(runs["default"][0]["losses"], runs["strict"][0]["losses"]))
    same = all(run["losses"] == results[0]["losses"] for results in runs.values() for run in results)
    print(f"  median step: default {median['default'] * 1000:.1f} ms, strict {median['strict'] * 1000:.1f} ms")
    print(f"  each mode's runs equal to the bit among themselves: {'yes' if same else 'NO'}; "
          f"max relative loss gap default vs strict over {args.steps} steps: {gap:.1e}")
    print(f"cpu_sums: strict / default steps/s ratio {median['default'] / median['strict']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

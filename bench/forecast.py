"""The drift forecast (tatu.evals.forecast) against real runs: a bank of SFT trajectories from a
finished trunk, each trained to its end with the limit lifted, then forecast from its first k evals.

The bank: REPLAY_N x TATU_LR x seeds runs (default 4 x 2 x 5 = 40) from `--trunk` on `--data`, each
`--steps` steps (cosine or constant as `--schedule`), the ruler scored every `--every` steps and at
step 0. The runs are the daemon's own pieces in one process: its config (load_config), its seed
loading, Trainer, MixedStream and ruler scorer (daemon/suite.py's score_suite); only the other eval
sets, the answers and the checkpoints are left out, so a run costs its steps and its ruler. Each run's
per-line ruler sums go to OUT/bank/<run>.json as they are made (a bank interrupted resumes where it
stopped; `--analyse-only` reads it back).

From each run's first k evals (k = 3, 4, 6; the step-0 baseline counted), the forecast of drift at
the last step, with the daemon's clock (cumulative LR, daemon/forecast.py), against the drift the
run reached there:
  coverage   share of runs whose 90% interval holds the reached drift (goal: 85-97%)
  |error|    median absolute error of the point forecast (drift points)
and the early stop MIX_FORECAST_ABORT=1 would make at `--limit` (at each eval from the third: the
forecast's lower bound over the limit, drift itself still under), against the abort by the limit
alone (drift over it at an eval):
  saved      steps the forecast's stops saved over the runs that crossed the limit, as a share of the
             steps those runs spent until their limit abort (goal: >= 30%)
  wrong      runs stopped by the forecast that never crossed the limit at any eval (goal: <= 1 in 40)

    nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python bench/forecast.py --trunk TRUNK/final --data DATA --out OUT
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

K_VALUES = (3, 4, 6)


@dataclass(frozen=True)
class BankRun:
    name: str
    replay_n: int
    lr: float
    seed: int
    steps: list[int]
    nll: list[list[float]]  # per eval, the ruler's per-line NLL sums
    tokens: list[int]
    env: dict[str, str]

    @property
    def drift(self) -> np.ndarray:
        nll = np.asarray(self.nll)
        return np.expm1((nll - nll[0]).sum(axis=1) / np.sum(self.tokens))


def run_env(args, replay_n: int, lr: float, seed: int) -> dict[str, str]:
    return {"TATU_DATA": str(args.data), "TATU_SEED_CKPT": str(args.trunk), "TATU_RUN": f"r{replay_n}-lr{lr:g}-s{seed}",
            "TATU_OUT": str(args.out / "runs"), "TATU_DEVICE": "cpu", "TATU_SEED": str(seed), "TATU_THREADS": "1",
            "SFT_GE": str(args.sft_ge), "REPLAY_N": str(replay_n), "TATU_LR": f"{lr:g}", "TATU_SCHEDULE": args.schedule,
            "MIX_STEPS_LIMIT": str(args.steps), "EVAL_EVERY": str(args.every), "MIX_FORGET_LIMIT": "1",
            "TATU_GEN_PROMPTS": "0", "TATU_EVAL_RESAMPLES": "100", "TATU_PRECISION": "fp32"}


def train_one(env: dict[str, str], every: int) -> tuple[list[int], list[list[float]], list[int]]:
    """One run to its end: the daemon's Trainer and stream from the trunk, the ruler at step 0 and every `every`."""
    import torch

    from tatu.daemon.config import load_config
    from tatu.daemon.start import starting_point
    from tatu.daemon.suite import RULER, load_suite, score_suite
    from tatu.daemon.trainer import Trainer, build_model
    from tatu.data.manifest import load_manifest
    from tatu.data.stream import MixedStream
    from tatu.model.device import set_threads

    config, _ = load_config(env)
    set_threads(config.threads)
    device = torch.device("cpu")
    manifest = load_manifest(config.data)
    start = starting_point(config, manifest)
    suite = load_suite(config, manifest, start.tokenizer)
    model = build_model(config, start.gpt_config, device, start.weights, start.weights_source)
    trainer = Trainer(config, start.gpt_config, device, model=model)
    trainer.lr_schedule_end = config.mix_steps_limit
    stream = MixedStream(config.data, mix=config.mix, micro_batch=config.micro_batch, seq_len=config.seq_len,
                         seed=config.seed, tokenizer_hash=start.tokenizer.hash)
    steps, nll = [], []

    def score(step: int) -> list[int]:
        model.eval()
        result = score_suite(model, suite, device, config, only=(RULER,))[RULER]
        model.train()
        steps.append(step)
        nll.append(result.scores.nll_sum.tolist())
        return result.scores.n_tokens.tolist()

    tokens = score(0)
    model.train()
    for step in range(1, config.mix_steps_limit + 1):
        stats = trainer.step(stream.next_step(), step)
        if not stats.finite:
            raise RuntimeError(f"{config.run}: non-finite loss at step {step}")
        if step % every == 0 or step == config.mix_steps_limit:
            score(step)
    return steps, nll, tokens


def build_bank(args) -> list[BankRun]:
    bank_dir = args.out / "bank"
    bank_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    grid = list(itertools.product(args.replay, args.lr, range(args.seeds)))
    for i, (replay_n, lr, seed) in enumerate(grid):
        env = run_env(args, replay_n, lr, seed)
        path = bank_dir / f"{env['TATU_RUN']}.json"
        if not path.exists():
            if args.analyse_only:
                continue
            started = time.perf_counter()
            steps, nll, tokens = train_one(env, args.every)
            path.write_text(json.dumps({"replay_n": replay_n, "lr": lr, "seed": seed, "steps": steps, "nll": nll,
                                        "tokens": tokens, "env": env}))
            print(f"[{i + 1}/{len(grid)}] {env['TATU_RUN']}: {time.perf_counter() - started:.0f}s", flush=True)
        saved = json.loads(path.read_text())
        runs.append(BankRun(env["TATU_RUN"], saved["replay_n"], saved["lr"], saved["seed"], saved["steps"],
                            saved["nll"], saved["tokens"], saved["env"]))
    return runs


def analyse(runs: list[BankRun], limit: float, k_values=K_VALUES) -> dict:
    from tatu.daemon.config import load_config
    from tatu.daemon.forecast import RunForecaster
    from tatu.evals.forecast import MIN_EVALS, Trajectory, forecast

    rows = {}
    per_run = []
    for run in runs:
        config, _ = load_config(run.env)
        clock = RunForecaster(config, config.mix_steps_limit).clock
        end, drift = run.steps[-1], run.drift
        trajectory = Trajectory.of(run.steps, run.nll, run.tokens)

        def upto(k: int) -> Trajectory:
            return Trajectory(trajectory.steps[:k], trajectory.nll[:k], trajectory.tokens)

        forecasts = {k: forecast(upto(k), end, limit, clock=clock, seed=config.seed + int(run.steps[k - 1]))
                     for k in range(MIN_EVALS, len(run.steps))}
        crossed_at = next((s for s, d in zip(run.steps, drift) if d > limit), None)
        stopped_at = next((run.steps[k - 1] for k, f in forecasts.items()
                           if f.over_limit and drift[k - 1] <= limit
                           and (crossed_at is None or run.steps[k - 1] < crossed_at)), None)
        per_run.append({"run": run.name, "reached": float(drift[-1]), "crossed_at": crossed_at, "stopped_at": stopped_at,
                        **{f"k{k}": {"value": forecasts[k].value, "lo": forecasts[k].lo, "hi": forecasts[k].hi}
                           for k in k_values if k in forecasts}})
    for k in k_values:
        made = [r for r in per_run if f"k{k}" in r]
        covered = [r[f"k{k}"]["lo"] <= r["reached"] <= r[f"k{k}"]["hi"] for r in made]
        errors = [abs(r[f"k{k}"]["value"] - r["reached"]) for r in made]
        rows[k] = {"runs": len(made), "coverage": float(np.mean(covered)) if made else math.nan,
                   "median_abs_error": float(np.median(errors)) if made else math.nan}
    crossed = [r for r in per_run if r["crossed_at"] is not None]
    spent = sum(r["crossed_at"] for r in crossed)
    saved = sum(r["crossed_at"] - r["stopped_at"] for r in crossed if r["stopped_at"] is not None)
    wrong = [r["run"] for r in per_run if r["crossed_at"] is None and r["stopped_at"] is not None]
    stop = {"limit": limit, "runs": len(per_run), "crossed": len(crossed),
            "stopped_early": sum(r["stopped_at"] is not None for r in crossed),
            "saved_share": saved / spent if spent else math.nan, "wrong_stops": len(wrong), "wrong_runs": wrong}
    return {"k": rows, "stop": stop, "per_run": per_run}


def table(result: dict) -> str:
    lines = ["| k (evals used) | runs | 90% coverage | median abs error |", "|---|---|---|---|"]
    for k, row in result["k"].items():
        lines.append(f"| {k} | {row['runs']} | {row['coverage']:.0%} | {row['median_abs_error'] * 100:.1f} points |")
    stop = result["stop"]
    lines += ["", f"early stop at MIX_FORGET_LIMIT {stop['limit']:.0%}: {stop['crossed']} of {stop['runs']} runs crossed "
              f"it; the forecast stopped {stop['stopped_early']} of them earlier, saving {stop['saved_share']:.0%} of "
              f"their steps; wrong stops (never crossed): {stop['wrong_stops']} of {stop['runs']}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trunk", type=Path, required=True, help="the finished trunk's checkpoint (its final/)")
    parser.add_argument("--data", type=Path, required=True, help="the data dir the trunk was trained on")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--replay", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2, 4])
    parser.add_argument("--lr", type=lambda s: [float(x) for x in s.split(",")], default=[3e-4, 1e-3])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--sft-ge", type=int, default=2)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--schedule", choices=("constant", "cosine"), default="constant")
    parser.add_argument("--limit", type=lambda s: [float(x) for x in s.split(",")], default=[0.08],
                        help="MIX_FORGET_LIMIT(s) the early stop is judged at (default run 5's 0.08)")
    parser.add_argument("--analyse-only", action="store_true", help="the runs already in OUT/bank only")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    runs = build_bank(args)
    if not runs:
        print("bench/forecast.py: no run in the bank", file=sys.stderr)
        return 1
    results = {limit: analyse(runs, limit) for limit in args.limit}
    (args.out / "forecast_bench.json").write_text(json.dumps({str(k): v for k, v in results.items()}, indent=1))
    print(f"bank: {len(runs)} runs, {args.steps} steps, ruler every {args.every}, SFT_GE {args.sft_ge}, REPLAY_N "
          f"{args.replay}, TATU_LR {args.lr}, {args.schedule}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; "
          f"{time.perf_counter() - started:.0f}s")
    first, *others = results.values()
    print(table(first))
    for result in others:  # the coverage does not depend on the limit: the early stop's line alone
        print(table(result).splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())

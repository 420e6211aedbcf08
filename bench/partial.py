"""Partial training against full: tokens/s of a step, resume-state size and peak RSS, one shape.

The daemon's own Trainer (daemon/trainer.py) for TATU_TRAIN=all, top:2 and lora, from the same
starting weights, on the very same batches (generated once, with a fixed seed), in one process on
one machine. Rounds alternate the three methods and each method's step time is the median over
its rounds, because the 2-core hosts this runs on are shared; the ratios to `all` are what to
read. The resume-state size is the bytes of the weights plus the optimizer moments the daemon
saves (save_resume's groups: the model state dict and optimizer_tensors), measured by writing
them with safetensors. Peak RSS is the process's high-water mark after each method's first
round (ru_maxrss only grows: each method runs after the previous one, so the three numbers are
cumulative and only an increase is attributable to the method that caused it).

    .venv/bin/python bench/partial.py [--steps 6] [--rounds 3] [--threads 1]
"""
from __future__ import annotations

import statistics

import numpy as np
import torch
from safetensors.torch import save as st_save

from step_timing import setup, time_trainers
from tatu.daemon.config import load_config
from tatu.daemon.resume import optimizer_tensors
from tatu.daemon.trainer import Trainer
from tatu.data.stream import MicroBatch, StepBatch
from tatu.model.checkpoint import model_state_for_saving
from tatu.model.gpt import GPT, GPTConfig

SHAPE = GPTConfig(vocab_size=2048, block_size=128, n_layer=6, n_head=6, n_embd=384)
MICRO, SEQ, PER_STEP = 8, 128, 4
METHODS = {"all": {}, "top:2": {"TATU_TRAIN": "top:2"}, "lora": {"TATU_TRAIN": "lora"}}


def batches(n: int) -> list[StepBatch]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        micro = [MicroBatch("sft", rng.integers(0, SHAPE.vocab_size, (MICRO, SEQ)),
                            rng.integers(0, SHAPE.vocab_size, (MICRO, SEQ))) for _ in range(PER_STEP)]
        out.append(StepBatch(micro, {"sft": MICRO * SEQ * PER_STEP}, 0.0))
    return out


def trainer_for(method: str, weights: dict) -> Trainer:
    env = {"TATU_DATA": "unused", "TATU_SEED_CKPT": "unused", "TATU_DEVICE": "cpu", "TATU_LR": "1e-3", **METHODS[method]}
    config, _ = load_config(env)
    return Trainer(config, SHAPE, torch.device("cpu"), weights, "bench")


def resume_bytes(trainer: Trainer) -> tuple[int, int]:
    flat, _ = optimizer_tensors(trainer.optimizer)
    return len(st_save(model_state_for_saving(trainer.model))), len(st_save({k: v.contiguous() for k, v in flat.items()}))


def main() -> None:
    args = setup(__doc__)
    weights = {k: v for k, v in GPT(SHAPE).state_dict().items() if k != "lm_head.weight"}
    steps = batches(args.steps)
    tokens = MICRO * SEQ * PER_STEP
    trainers = {m: trainer_for(m, weights) for m in METHODS}
    seconds, rss = time_trainers(trainers, steps, args.rounds)
    full = statistics.median(seconds["all"])
    print(f"shape n_layer {SHAPE.n_layer} n_embd {SHAPE.n_embd} vocab {SHAPE.vocab_size}; step = {PER_STEP} x {MICRO} x {SEQ} "
          f"tokens; {args.rounds} rounds x {args.steps - 1} timed steps, {args.threads} thread(s)")
    print(f"{'method':<7} {'trainable':>22} {'tok/s':>8} {'vs all':>7} {'weights MB':>11} {'moments MB':>11} {'peak RSS MB':>12}")
    for method, trainer in trainers.items():
        step_s = statistics.median(seconds[method])
        weights_b, moments_b = resume_bytes(trainer)
        summary = trainer.summary
        print(f"{method:<7} {summary['trainable']:>12,} ({100 * summary['trainable'] / summary['base']:5.1f}%) "
              f"{tokens / step_s:>8.0f} {full / step_s:>6.2f}x {weights_b / 1e6:>11.2f} {moments_b / 1e6:>11.2f} {rss[method]:>12.0f}")


if __name__ == "__main__":
    main()

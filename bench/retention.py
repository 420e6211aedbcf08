"""The retention terms against a plain step: step time of l2sp, ewc and distill vs plain, one shape, peak RSS.

The daemon's own Trainer (daemon/trainer.py) from the same seed weights, on the very same batches
(generated once, fixed seed), in one process on one machine: TATU_ANCHOR=l2sp and ewc (the Fisher
a random stand-in: its values do not change the cost), TATU_DISTILL=1 on every micro-batch (2 sft +
2 replay here, TATU_DISTILL_ON=both: the most it can cost), against plain. Rounds alternate the
methods and each method's step time is the median over its rounds, because the 2-core hosts this
runs on are shared; the ratios to plain are what to read. Goals (issue 25): l2sp and ewc within 5%
of plain; distill at most one extra forward per distilled micro-batch. So the parts of a distilled
micro-batch are timed on their own too, each the median of `--rounds` repetitions on the step's
first micro-batch: the seed's forward (no grad), the step's own forward (the trained model's, with
its loss, under autograd, as the step runs it) and the KL's forward + backward on logits of that
shape. distill's extra per distilled micro-batch is printed in both units. Peak RSS is the process's
high-water mark after each method's first round (ru_maxrss only grows: cumulative, in the order printed).

    .venv/bin/python bench/retention.py [--steps 6] [--rounds 3] [--threads 1]
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from step_timing import setup, time_trainers
from tatu.daemon.config import load_config
from tatu.daemon.retention.anchor import Anchor
from tatu.daemon.retention.distill import Distiller, distill_sum
from tatu.daemon.trainer import Trainer, build_model, run_precision
from tatu.data.stream import MicroBatch, StepBatch
from tatu.model.adapters import trainable_parameters
from tatu.model.gpt import GPT, GPTConfig

SHAPE = GPTConfig(vocab_size=2048, block_size=128, n_layer=6, n_head=6, n_embd=384)
MICRO, SEQ, PER_CHANNEL = 8, 128, 2
METHODS = {"plain": {}, "l2sp": {"TATU_ANCHOR": "l2sp", "TATU_ANCHOR_WEIGHT": "10"},
           "ewc": {"TATU_ANCHOR": "ewc", "TATU_ANCHOR_WEIGHT": "10"},
           "distill": {"TATU_DISTILL": "1", "TATU_DISTILL_WEIGHT": "0.5", "TATU_DISTILL_ON": "both"}}


def batches(n: int) -> list[StepBatch]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        micro = [MicroBatch(channel, rng.integers(0, SHAPE.vocab_size, (MICRO, SEQ)),
                            rng.integers(0, SHAPE.vocab_size, (MICRO, SEQ)))
                 for channel in ("sft",) * PER_CHANNEL + ("replay",) * PER_CHANNEL]
        per = MICRO * SEQ * PER_CHANNEL
        out.append(StepBatch(micro, {"sft": per, "replay": per}, 0.5))
    return out


def trainer_for(method: str, weights: dict) -> Trainer:
    env = {"TATU_DATA": "unused", "TATU_SEED_CKPT": "unused", "TATU_DEVICE": "cpu", "TATU_LR": "1e-3",
           "TATU_PRECISION": "fp32", "SFT_GE": str(PER_CHANNEL), "REPLAY_N": str(PER_CHANNEL), **METHODS[method]}
    config, _ = load_config(env)
    model = build_model(config, SHAPE, torch.device("cpu"), weights, "bench")
    named = trainable_parameters(model)
    anchor = distiller = None
    if config.anchor != "none":
        fisher = {n: torch.rand(p.shape) for n, p in named} if config.anchor == "ewc" else None
        anchor = Anchor(config.anchor, config.anchor_weight, named, weights, fisher)
    if config.distill:
        distiller = Distiller(SHAPE, weights, ("sft", "replay"), config.distill_weight, config.distill_t,
                              run_precision(config, torch.device("cpu")), torch.device("cpu"))
    trainer = Trainer(config, SHAPE, torch.device("cpu"), model=model, anchor=anchor, distiller=distiller)
    return trainer


def main() -> None:
    args = setup(__doc__)
    weights = {k: v for k, v in GPT(SHAPE).state_dict().items() if k != "lm_head.weight"}
    steps = batches(args.steps)
    trainers = {m: trainer_for(m, weights) for m in METHODS}
    seconds, rss = time_trainers(trainers, steps, args.rounds)
    # The whole-step ratios move by several percent between runs on a shared 2-core host; the parts
    # each method adds, timed alone, are what the goals are judged on.
    # A penalty's part of the step: its add_gradient (with the norm of what it adds) and the data
    # gradient's norm taken before it (Trainer._total_norm), what `grad_norm_data` costs.
    penalty = {m: statistics.median(timed(lambda t=trainers[m]: (t._total_norm(), t.anchor.add_gradient()))
                                    for _ in range(args.rounds)) for m in ("l2sp", "ewc")}
    parts = distilled_parts(trainers["distill"], steps[0].micro_batches[0], args.rounds)
    plain = statistics.median(seconds["plain"])
    print(f"shape n_layer {SHAPE.n_layer} n_embd {SHAPE.n_embd} vocab {SHAPE.vocab_size}; step = {2 * PER_CHANNEL} x "
          f"{MICRO} x {SEQ} tokens; {args.rounds} rounds x {args.steps - 1} timed steps, {args.threads} thread(s)")
    print(f"{'method':<8} {'ms/step':>9} {'vs plain':>9} {'per round':>13} {'peak RSS MB':>12}")
    for method in METHODS:
        step_s = statistics.median(seconds[method])
        ratios = [a / b for a, b in zip(seconds[method], seconds["plain"])]
        print(f"{method:<8} {step_s * 1e3:>9.1f} {step_s / plain:>8.3f}x {min(ratios):>6.3f}-{max(ratios):.3f} "
              f"{rss[method]:>12.0f}")
    for method, cost in penalty.items():
        print(f"{method} penalty alone (data gradient norm + add_gradient) {cost * 1e3:.1f} ms per step = {cost / plain:.2%} of a plain step")
    per_micro = (statistics.median(seconds["distill"]) - plain) / (2 * PER_CHANNEL)
    added = parts["seed"] + parts["kl"]
    print(f"per micro-batch: seed forward {parts['seed'] * 1e3:.1f} ms, the step's own forward {parts['step'] * 1e3:.1f} ms, "
          f"KL forward + backward {parts['kl'] * 1e3:.1f} ms")
    print(f"distill adds per distilled micro-batch: seed forward + KL {added * 1e3:.1f} ms = {added / parts['seed']:.3f} "
          f"seed forwards = {added / parts['step']:.3f} of the step's own forwards; in the whole step "
          f"{per_micro * 1e3:.1f} ms = {per_micro / parts['seed']:.3f} seed forwards")


def timed(fn) -> float:
    """Seconds of one call of `fn`, after one untimed call (allocations, caches)."""
    fn()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def distilled_parts(trainer: Trainer, micro: MicroBatch, rounds: int) -> dict[str, float]:
    """Seconds of a distilled micro-batch's parts, each the median of `rounds`."""
    x, y = torch.from_numpy(micro.x), torch.from_numpy(micro.y)
    distiller = trainer.distiller
    seed_logits = distiller.seed_logits(x)

    def step_forward():
        logits, nll = trainer.forward_model(x, y)
        nll.sum()

    logits = torch.randn(seed_logits.shape, requires_grad=True)

    def kl():
        logits.grad = None
        distill_sum(logits, seed_logits, y, distiller.t).backward()

    return {"seed": statistics.median(timed(lambda: distiller.seed_logits(x)) for _ in range(rounds)),
            "step": statistics.median(timed(step_forward) for _ in range(rounds)),
            "kl": statistics.median(timed(kl) for _ in range(rounds))}

if __name__ == "__main__":
    main()

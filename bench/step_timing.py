"""What the step-cost benchmarks share (bench/partial.py, bench/retention.py): their command line,
and the timing loop: each trainer's steps, round-robin over the rounds so a slow spell of the
machine falls on every one."""
from __future__ import annotations

import argparse
import resource
import time

import torch


def setup(doc: str) -> argparse.Namespace:
    """The step-cost benchmarks' command line (--steps, --rounds, --threads), applied: torch's
    thread count set and its global RNG seeded, so every trainer starts from the same weights."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    return args


def time_trainers(trainers: dict, steps: list, rounds: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """({method: seconds per step, one per round}, {method: peak RSS in MB after its first round}).
    Each round warms up on steps[0] (allocations, optimizer state), then times the rest."""
    seconds: dict[str, list[float]] = {m: [] for m in trainers}
    rss: dict[str, float] = {}
    for round_ in range(rounds):
        for method, trainer in trainers.items():
            trainer.step(steps[0], 1)
            started = time.perf_counter()
            for i, batch in enumerate(steps[1:], start=2):
                trainer.step(batch, i)
            seconds[method].append((time.perf_counter() - started) / (len(steps) - 1))
            if round_ == 0:
                rss[method] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return seconds, rss

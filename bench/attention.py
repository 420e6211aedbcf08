"""Training-step time (forward + backward + AdamW) with fused SDPA attention vs the manual path.

Both models start from the same weights and see the same batches; repetitions are interleaved
(sdpa, manual, sdpa, manual, ...) so drift in machine load hits both equally, and the medians
are compared. Peak memory is reported on CUDA (torch.cuda.max_memory_allocated).

    .venv/bin/python bench/attention.py [--device auto|cpu|cuda] [--reps 10]
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from tatu.model.device import DeviceError, resolve_device
from tatu.model.gpt import GPT, GPTConfig


def pick_device(name: str) -> torch.device:
    try:
        return resolve_device(name)
    except DeviceError as exc:
        raise SystemExit(f"bench/attention.py: --device {exc}")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step(model, optimizer, x, y) -> None:
    _, nll = model(x, y)
    nll.mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--reps", type=int, default=10, help="timed steps per path")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--embd", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    args = parser.parse_args()
    device = pick_device(args.device)

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=2048, block_size=args.block, n_layer=args.layers, n_head=args.heads, n_embd=args.embd)
    models = {"sdpa": GPT(cfg).to(device)}
    models["manual"] = copy.deepcopy(models["sdpa"])
    models["manual"].set_attention("manual")
    optimizers = {k: torch.optim.AdamW(m.parameters(), lr=3e-4) for k, m in models.items()}
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, cfg.vocab_size, (args.batch, cfg.block_size + 1), generator=gen) for _ in range(4)]
    batches = [(b[:, :-1].to(device), b[:, 1:].to(device)) for b in batches]

    times: dict[str, list[float]] = {k: [] for k in models}
    peak: dict[str, int] = {}
    for rep in range(args.warmup + args.reps):
        for name, model in models.items():
            x, y = batches[rep % len(batches)]
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            sync(device)
            start = time.perf_counter()
            train_step(model, optimizers[name], x, y)
            sync(device)
            elapsed = time.perf_counter() - start
            if rep >= args.warmup:
                times[name].append(elapsed)
            if device.type == "cuda":
                peak[name] = max(peak.get(name, 0), torch.cuda.max_memory_allocated(device))

    sdpa_ms = statistics.median(times["sdpa"]) * 1e3
    manual_ms = statistics.median(times["manual"]) * 1e3
    print(
        f"config: {cfg.n_layer} layers, {cfg.n_head} heads, n_embd {cfg.n_embd}, block {cfg.block_size}, "
        f"batch {args.batch}, vocab {cfg.vocab_size}; device {device} (torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads); median of {args.reps} interleaved steps"
    )
    print(f"attention: sdpa {sdpa_ms:.1f} ms/step, manual {manual_ms:.1f} ms/step, speedup {manual_ms / sdpa_ms:.2f} x")
    if peak:
        mib = {k: v / 2**20 for k, v in peak.items()}
        print(
            f"peak memory: sdpa {mib['sdpa']:.0f} MiB, manual {mib['manual']:.0f} MiB, "
            f"ratio {mib['manual'] / mib['sdpa']:.2f} x"
        )
    else:
        print("peak memory: not measured on CPU")


if __name__ == "__main__":
    main()

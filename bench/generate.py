"""Greedy generation of 64 prompts of varied lengths: one batch vs one prompt at a time.

Both use the KV cache and the same model; the outputs must be equal token for token (the
script exits 1 otherwise), so the ratio compares two ways of computing the same thing.

    .venv/bin/python bench/generate.py [--device auto|cpu|cuda] [--prompts 64] [--new 64]
"""
from __future__ import annotations

import argparse
import time

import torch

from tatu.model.device import DeviceError, resolve_device
from tatu.model.gpt import GPT, GPTConfig


def pick_device(name: str) -> torch.device:
    try:
        return resolve_device(name)
    except DeviceError as exc:
        raise SystemExit(f"bench/generate.py: --device {exc}")


def timed(device, fn):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return result, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new", type=int, default=64, help="max new tokens per prompt")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--embd", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    args = parser.parse_args()
    device = pick_device(args.device)

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=2048, block_size=256, n_layer=args.layers, n_head=args.heads, n_embd=args.embd)
    model = GPT(cfg).to(device).eval()
    # Scaled-up random weights: greedy output varies (no one-token loops) and argmax gaps stay
    # far above float rounding, so equality between the two ways is a meaningful check.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8)
    gen = torch.Generator().manual_seed(1)
    lengths = torch.randint(4, 97, (args.prompts,), generator=gen).tolist()
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist() for n in lengths]

    model.generate(prompts[:2], 4)  # warm-up: first-call allocations and kernel selection
    batched, batched_s = timed(device, lambda: model.generate(prompts, args.new))
    sequential, sequential_s = timed(device, lambda: [model.generate([p], args.new)[0] for p in prompts])
    n_tokens = sum(len(o) for o in batched)

    print(
        f"config: {cfg.n_layer} layers, n_embd {cfg.n_embd}, vocab {cfg.vocab_size}; {args.prompts} prompts of "
        f"{min(lengths)}-{max(lengths)} tokens, {args.new} new tokens each, greedy, KV cache; device {device} "
        f"(torch {torch.__version__}, {torch.get_num_threads()} threads)"
    )
    print(
        f"generate: batched {batched_s:.2f} s ({n_tokens / batched_s:.0f} tok/s), sequential {sequential_s:.2f} s "
        f"({n_tokens / sequential_s:.0f} tok/s), speedup {sequential_s / batched_s:.1f} x"
    )
    if batched != sequential:
        differing = sum(a != b for a, b in zip(batched, sequential))
        print(f"outputs: {differing} of {len(prompts)} rows DIFFER between batched and sequential")
        return 1
    print(f"outputs: identical ({len(prompts)} rows, {n_tokens} tokens)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

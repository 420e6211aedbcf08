"""Can the mixed stream feed training? Stream tokens/s vs what a training step consumes, same run.

Builds its own small data dir in a temp dir (a BPE tokenizer of ~2048 ids trained on generated
pseudo-Portuguese, a text replay channel and an SFT channel), then times
  - MixedStream.next_step() alone (run 5's mix: 8 SFT + 6 replay micro-batches), and
  - a training step of the demo model on those batches (forward + backward per micro-batch,
    token-weighted loss over the step, one AdamW step),
both counted in input positions (B x T per micro-batch). Target: stream >= 50x training.

    .venv/bin/python bench/stream.py [--device cpu|cuda|auto] [--train-steps 2]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

from tatu.data.build import BuildSpec, build_data
from tatu.data.stream import MixedStream
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import BPETokenizer

SYLLABLES = "ta tu ca sa ção ma pa lo re na ni de do que vo ve bra cri mãe pão é lu sol mar".split()


def pseudo_text(rng: random.Random, n_docs: int, words_per_doc: int) -> list[str]:
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(3000)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(words_per_doc // 2, words_per_doc)))
            for _ in range(n_docs)]


def build_bench_data(root: Path, seed: int) -> tuple[Path, BPETokenizer]:
    rng = random.Random(seed)
    corpus = pseudo_text(rng, 1500, 120)
    (root / "replay.txt").write_text("\n\n".join(corpus) + "\n", encoding="utf-8")
    pairs = [{"prompt": p, "response": r} for p, r in zip(pseudo_text(rng, 3000, 16), pseudo_text(rng, 3000, 30))]
    (root / "sft.jsonl").write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs), encoding="utf-8")
    tok = BPETokenizer.train(corpus, vocab_size=2048)
    spec = BuildSpec(tokenizer="", out_dir=str(root / "data"), text={"replay": [str(root / "replay.txt")]},
                     sft={"sft": [str(root / "sft.jsonl")]}, seq_len=128)
    build_data(spec, tok, progress=False)
    return root / "data", tok


def stream_tokens_per_s(data_dir: Path, args) -> float:
    stream = MixedStream(data_dir, mix={"sft": args.sft_ge, "replay": args.replay_n}, micro_batch=args.micro_batch,
                         seq_len=args.seq_len, seed=0)
    stream.next_step()  # first-touch of the memmaps and permutations
    tokens, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.stream_seconds:
        tokens += sum(mb.x.size for mb in stream.next_step().micro_batches)
    return tokens / (time.perf_counter() - start)


def train_tokens_per_s(data_dir: Path, vocab_size: int, device: torch.device, args) -> float:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=vocab_size, block_size=args.seq_len, n_layer=4, n_head=4, n_embd=128)
    model = GPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    stream = MixedStream(data_dir, mix={"sft": args.sft_ge, "replay": args.replay_n}, micro_batch=args.micro_batch,
                         seq_len=args.seq_len, seed=1)
    steps = [stream.next_step() for _ in range(args.train_steps + 1)]  # batches made before timing

    def one_step(step) -> int:
        total_targets = max(step.total_targets, 1)
        for mb in step.micro_batches:
            _, nll = model(torch.from_numpy(mb.x).to(device), torch.from_numpy(mb.y).to(device))
            (nll.sum() / total_targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return sum(mb.x.size for mb in step.micro_batches)

    one_step(steps[0])  # warm-up (allocator, kernels)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    tokens, start = 0, time.perf_counter()
    for step in steps[1:]:
        tokens += one_step(step)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return tokens / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (training side only)")
    parser.add_argument("--train-steps", type=int, default=2)
    parser.add_argument("--stream-seconds", type=float, default=2.0)
    parser.add_argument("--sft-ge", type=int, default=8)
    parser.add_argument("--replay-n", type=int, default=6)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    device_name = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    device = torch.device(device_name)

    with tempfile.TemporaryDirectory(prefix="tatu-bench-stream-") as tmp:
        data_dir, tok = build_bench_data(Path(tmp), args.seed)
        stream_rate = stream_tokens_per_s(data_dir, args)
        train_rate = train_tokens_per_s(data_dir, tok.vocab_size, device, args)
    ratio = stream_rate / train_rate
    print(f"mix sft={args.sft_ge} replay={args.replay_n} x micro_batch {args.micro_batch} x seq_len {args.seq_len}; "
          f"model 4 layers, 4 heads, n_embd 128, vocab {tok.vocab_size}; torch threads {torch.get_num_threads()}")
    print(f"stream: {stream_rate:,.0f} tokens/s   training step ({device}): {train_rate:,.0f} tokens/s")
    verdict = "OK" if ratio >= 50 else "BELOW TARGET"
    print(f"SUMMARY bench/stream.py: stream {stream_rate / 1e6:.2f}M tokens/s = {ratio:,.0f}x a {device.type} training "
          f"step of the demo model ({train_rate:,.0f} tokens/s) [target >= 50x: {verdict}]")
    return 0 if ratio >= 50 else 1


if __name__ == "__main__":
    sys.exit(main())

"""The eval rig vs a naive evaluator as operators often write it, in the same run.

    .venv/bin/python bench/eval.py [--ckpt CKPT] [--data DATA_DIR] [--repeat 2]

Naive: batches of 2 lines in file order, right-padded to the longer line (padding targets
ignored), lines cut at block_size, ppl = exp(mean of the per-batch mean losses).
Rig: tatu.evals.line_scores.score_lines (length-bucketed batches by a token budget,
inference_mode, exact windows, per-line sums), ppl = exp(sum NLL / sum tokens).
Both are timed on the same lines and model, and both PPLs are compared with a float64,
one-line-at-a-time reference (log_softmax + gather on a float64 copy of the model).

Lines: the eval sets of --data's manifest (tokenized with the checkpoint's tokenizer), or by
default synthetic lines with the operator's set sizes (ptVal 390 + enRuler 166 text lines,
sftHeld 100 pairs) and realistic lengths: text lines of 20-300 characters at ~3.7 characters
per BPE token, pairs with a prompt of 5-40 tokens and a response of 5-120 tokens.
The model: --ckpt, or the demo size (vocab 2048, block 128, 4 layers, 4 heads, 128 wide),
randomly initialised (speed and exactness do not depend on training). A random model is
near-uniform on every line, so the naive evaluator's bias (lines of different lengths and
difficulty weighted equally per batch) is small here; it grows with a trained --ckpt.
Timings need a quiet machine: under CPU contention small batched ops slow down erratically.
"""
from __future__ import annotations

import argparse
import copy
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tatu.data.manifest import load_manifest
from tatu.evals.line_scores import score_lines
from tatu.evals.sets import EvalLine, load_eval_set
from tatu.model.gpt import GPT, GPTConfig, IGNORE_INDEX

SIZES = {"ptVal": 390, "enRuler": 166, "sftHeld": 100}


def synthetic_sets(vocab_size: int, seed: int) -> dict[str, list[EvalLine]]:
    rng = np.random.default_rng(seed)
    sets: dict[str, list[EvalLine]] = {}
    for name, n in SIZES.items():
        lines = []
        for _ in range(n):
            if name == "sftHeld":
                prompt, response = int(rng.integers(5, 41)), int(rng.integers(5, 121))
                ids = rng.integers(0, vocab_size, 2 + prompt + response + 1).tolist()
                is_target = [False] * (2 + prompt) + [True] * (response + 1)
                text_chars = int(response * 3.7)
            else:
                text_chars = int(np.clip(rng.lognormal(math.log(110), 0.6), 20, 300))
                tokens = max(1, round(text_chars / 3.7))
                ids = rng.integers(0, vocab_size, 1 + tokens).tolist()
                is_target = [False] + [True] * tokens
            lines.append(EvalLine(ids, is_target, "x" * text_chars))
        sets[name] = lines
    return sets


def naive_ppl(model: GPT, lines: list[EvalLine], batch_size: int = 2, pad_to_block: bool = False) -> float:
    """The operator's evaluator: the mean of per-batch mean losses (not token-weighted).

    pad_to_block: every batch padded to the full context (fixed-shape tensors, as many
    loaders do); otherwise to the longer line of the pair (the generous variant)."""
    block = model.config.block_size
    model.eval()
    losses = []
    with torch.no_grad():
        for i in range(0, len(lines), batch_size):
            batch = lines[i : i + batch_size]
            seqs = [line.ids[: block + 1] for line in batch]
            width = block if pad_to_block else max(len(s) for s in seqs) - 1
            x = torch.zeros(len(batch), width, dtype=torch.long)
            y = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
            for r, (line, seq) in enumerate(zip(batch, seqs)):
                x[r, : len(seq) - 1] = torch.tensor(seq[:-1])
                y[r, : len(seq) - 1] = torch.tensor(
                    [t if m else IGNORE_INDEX for t, m in zip(seq[1:], line.is_target[1 : len(seq)])]
                )
            logits, _ = model(x)
            losses.append(F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=IGNORE_INDEX).item())
    return math.exp(sum(losses) / len(losses))


def reference_ppl(model64: GPT, lines: list[EvalLine]) -> float:
    """float64, one line at a time, non-overlapping windows of block_size inputs."""
    block = model64.config.block_size
    total, count = 0.0, 0
    with torch.no_grad():
        for line in lines:
            for start in range(0, len(line.ids) - 1, block):
                window = line.ids[start : start + block]
                logits, _ = model64(torch.tensor([window]))
                logp = torch.log_softmax(logits[0].double(), dim=-1)
                for offset in range(len(window)):
                    pos = start + offset + 1
                    if pos < len(line.ids) and line.is_target[pos]:
                        total -= float(logp[offset, line.ids[pos]])
                        count += 1
    return math.exp(total / count)


def timed(fn, repeat: int) -> tuple[float, float]:
    """(best wall time in seconds, result of the last call)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", type=Path, help="checkpoint (default: a random demo-size model)")
    parser.add_argument("--data", type=Path, help="data dir whose manifest lists the eval sets (needs --ckpt)")
    parser.add_argument("--repeat", type=int, default=2, help="timed repetitions (best is kept)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.ckpt is not None:
        from tatu.model.hf import load_checkpoint_or_gpt2

        ckpt = load_checkpoint_or_gpt2(args.ckpt)
        model, tokenizer = ckpt.build_model("cpu"), ckpt.tokenizer
    else:
        torch.manual_seed(args.seed)
        model, tokenizer = GPT(GPTConfig(vocab_size=2048, block_size=128, n_layer=4, n_head=4, n_embd=128)), None
    model.eval()
    if args.data is not None:
        if tokenizer is None:
            parser.error("--data needs --ckpt (its tokenizer reads the eval files)")
        evals = load_manifest(args.data)["evals"]
        sets = {name: load_eval_set(args.data / e["file"], tokenizer, name=name).lines for name, e in evals.items()}
    else:
        sets = synthetic_sets(model.config.vocab_size, args.seed)

    n_lines = sum(len(lines) for lines in sets.values())
    n_tokens = sum(sum(line.is_target) for lines in sets.values() for line in lines)
    print(f"{n_lines} lines ({' + '.join(f'{n} {len(v)}' for n, v in sets.items())}), {n_tokens} target tokens, "
          f"{torch.get_num_threads()} CPU threads")

    def run_rig():
        out = {}
        for name, lines in sets.items():
            s = score_lines(model, lines)
            out[name] = math.exp(s.nll_sum.sum() / s.n_tokens.sum())
        return out

    def run_naive():
        return {name: naive_ppl(model, lines) for name, lines in sets.items()}

    def run_naive_block():
        return {name: naive_ppl(model, lines, pad_to_block=True) for name, lines in sets.items()}

    warm = [line for lines in sets.values() for line in lines[:4]]
    score_lines(model, warm), naive_ppl(model, warm)  # warm-up: allocator and kernels
    rig_s, rig_ppl = timed(run_rig, args.repeat)
    naive_s, naive_ppls = timed(run_naive, args.repeat)
    block_s, _ = timed(run_naive_block, args.repeat)
    model64 = copy.deepcopy(model).double()
    ref = {name: reference_ppl(model64, lines) for name, lines in sets.items()}

    print(f"{'set':<10} {'reference':>12} {'rig':>12} {'rig err':>9} {'naive':>12} {'naive err':>10}")
    rig_err = naive_err = 0.0
    for name in sets:
        e_rig = abs(rig_ppl[name] / ref[name] - 1)
        e_naive = abs(naive_ppls[name] / ref[name] - 1)
        rig_err, naive_err = max(rig_err, e_rig), max(naive_err, e_naive)
        print(f"{name:<10} {ref[name]:>12.4f} {rig_ppl[name]:>12.4f} {e_rig:>9.1e} {naive_ppls[name]:>12.4f} {e_naive:>10.2%}")
    print(f"time: rig {rig_s:.2f} s, naive padded to the pair {naive_s:.2f} s, naive padded to the context {block_s:.2f} s")
    verdict = "PASS" if naive_s / rig_s >= 5 and rig_err <= 1e-6 else "FAIL"
    print(f"eval rig vs naive (batch 2, mean of batch means), {n_lines} lines, {torch.get_num_threads()} CPU threads: "
          f"{naive_s / rig_s:.1f}x faster than the pair-padded naive, {block_s / rig_s:.1f}x than the context-padded one; "
          f"PPL error vs float64 reference: rig {rig_err:.1e}, naive {naive_err:.2%} (max over sets) [{verdict}: >= 5x, <= 1e-6]")


if __name__ == "__main__":
    main()

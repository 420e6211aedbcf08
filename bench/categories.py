"""Eval cost of the per-category metrics and the multiple-choice tasks: each eval set of a data
dir scored as the daemon does (whole set, 2000 bootstrap resamples), with its categories on
(per-token NLLs kept, every category's ppl/bpc and CI) vs off, on the same model in the same
process, median of --repeat; then the demo's generated tasks (100 items each) scored the same way.

    .venv/bin/python bench/categories.py --data demo/data [--ckpt demo/sweeps/demo-replay/runs/demo-replay.replay-n6-s1/final]

Without --ckpt the model is the demo's shape (4 layers x 128, block 128) freshly initialised:
the cost of scoring does not depend on what the weights learned. Also prints the tagger's
throughput at data build (from the manifest).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from tatu.data.manifest import load_manifest
from tatu.data.tags import read_tags
from tatu.data.task_gen import TASKS, generate_task
from tatu.evals.choice import ChoiceItem, score_task
from tatu.evals.categories import category_results, token_categories, word_chars
from tatu.evals.scoring import evaluate
from tatu.evals.sets import load_eval_set
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer_json import load_tokenizer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--ckpt", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    manifest = load_manifest(args.data)
    if args.ckpt:
        from tatu.model.hf import load_checkpoint_or_gpt2

        loaded = load_checkpoint_or_gpt2(args.ckpt)
        model, tok = loaded.build_model("cpu"), loaded.tokenizer
    else:
        tok = load_tokenizer(args.data / manifest["tokenizer"])
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=128, n_layer=4, n_head=4, n_embd=128))
    model.eval()
    total = {"off": 0.0, "on": 0.0}
    print(f"{'set':<10} {'lines':>6} {'off s':>8} {'on s':>8} {'on/off':>7}  tagger at build")
    for name, entry in manifest["evals"].items():
        tags = entry.get("tags") or {}
        if "file" not in tags:
            print(f"{name:<10} no tags: {tags.get('error')}")
            continue
        eval_set = load_eval_set(args.data / entry["file"], tok, name=name)
        units = read_tags(args.data / tags["file"], tags["sha256"])
        categories = token_categories(eval_set, tok, units)
        chars = word_chars(eval_set, tok, categories)

        def off():
            evaluate(model, eval_set, n_resamples=args.resamples, seed=0)

        def on():
            whole = evaluate(model, eval_set, n_resamples=args.resamples, seed=0, per_token=True)
            category_results(whole, categories, chars, args.resamples, 0)

        times = {}
        for label, fn in (("off", off), ("on", on)):
            fn()  # warm-up
            runs = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                fn()
                runs.append(time.perf_counter() - started)
            times[label] = statistics.median(runs)
        print(f"{name:<10} {entry['lines']:>6} {times['off']:>8.3f} {times['on']:>8.3f} {times['on'] / times['off']:>6.2f}x"
              f"  {tags['units']} units in {tags['seconds']:.2f}s ({tags['units_per_s']:,.0f} units/s, {tags['package']})")
        total["off"] += times["off"]
        total["on"] += times["on"]
    tasks = {kind: [ChoiceItem(i, t["context"], tuple(t["choices"]), t["answer"])
                    for i, t in enumerate(generate_task(kind, 100, 0))] for kind in TASKS}
    task_seconds = 0.0
    for kind, items in tasks.items():
        score_task(model, items, tok, kind)  # warm-up
        runs = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            score_task(model, items, tok, kind)
            runs.append(time.perf_counter() - started)
        task_seconds += statistics.median(runs)
        print(f"task {kind}: {len(items)} items, {sum(len(i.choices) for i in items)} choices, {statistics.median(runs):.3f}s")
    print(f"all sets: off {total['off']:.3f}s, categories on {total['on']:.3f}s ({total['on'] / total['off']:.2f}x); "
          f"with the {len(tasks)} tasks too {total['on'] + task_seconds:.3f}s ({(total['on'] + task_seconds) / total['off']:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

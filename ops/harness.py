"""`tatu eval CKPT --harness --set NAME=FILE`: tatu's numbers beside lm-evaluation-harness's.

lm-eval runs its own HF backend (transformers' GPT2LMHeadModel loaded from an exported
directory, no network) on the task shipped in tatu/evals/harness (loglikelihood_rolling over
the set's lines). tatu scores the same lines with its own rig. The two rules are the same for
a line that fits one context window, BOS included: lm-eval conditions a document's first token
on the tokenizer's BOS (tatu's <|bos|>), predicts every token once, and divides by the UTF-8
bytes of the text, as tatu does. They differ on a line longer than the context: both cut it
into windows of block_size predictions, but lm-eval's last, partial window is fed up to
block_size earlier tokens as context, where tatu's starts fresh. So when no line is longer than
the context the bits per byte must agree to MATCH_TOL, and a disagreement is an error (exit 1).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from tatu.exitcodes import BAD_CONFIG, BAD_DATA, USAGE, TatuExit

TASK = "tatu_rolling"
MATCH_TOL = 1e-6  # bits per byte, under the matched rule
LN2 = math.log(2.0)


def task_dir() -> Path:
    import tatu.evals.harness

    return Path(tatu.evals.harness.__file__).parent


def offline() -> None:
    """Nothing is downloaded: the model, the tokenizer and the data are local files."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(name, "1")


def word_count(text: str) -> int:
    """lm-eval's word count for word_perplexity (its Task.count_words)."""
    return len(re.split(r"\s+", text))


def make_lm(hf_dir: str | Path, device: str = "cpu", batch_size: int = 8):
    """lm-eval's HF backend on an exported directory, in float32 like tatu's evals."""
    offline()
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(hf_dir), dtype="float32", device=device, batch_size=batch_size)


def score_with_lm_eval(lm, set_file: str | Path) -> dict:
    """Run the shipped task on one text file: lm-eval's three metrics and its per-line log-likelihoods."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(task_dir()), include_defaults=False,
                          metadata={"tatu_set": str(Path(set_file).resolve())})
    out = simple_evaluate(model=lm, tasks=[TASK], task_manager=manager, log_samples=True)
    metrics = out["results"][TASK]
    samples = sorted(out["samples"][TASK], key=lambda s: s["doc_id"])
    return {
        "bits_per_byte": metrics["bits_per_byte,none"],
        "byte_perplexity": metrics["byte_perplexity,none"],
        "word_perplexity": metrics["word_perplexity,none"],
        "line_loglikelihood": [float(s["resps"][0][0]) for s in samples],
        "lm_eval_version": out.get("lm_eval_version") or _version("lm_eval"),
    }


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


@dataclass
class HarnessRow:
    """One set scored by both tools. `n_long`: lines longer than the context (where the rules differ)."""

    name: str
    n_lines: int
    n_long: int
    block_size: int
    tatu_bpb: float
    lm_eval_bpb: float
    tatu_byte_ppl: float
    lm_eval_byte_ppl: float
    tatu_word_ppl: float
    lm_eval_word_ppl: float
    max_line_nll_diff: float  # nats, the largest per-line |tatu - lm-eval|

    @property
    def matched(self) -> bool:
        return self.n_long == 0

    @property
    def agrees(self) -> bool:
        return abs(self.tatu_bpb - self.lm_eval_bpb) <= MATCH_TOL


def reconcile(name: str, eval_set, tatu_result, harness: dict, block_size: int) -> HarnessRow:
    scores = tatu_result.scores
    if len(harness["line_loglikelihood"]) != len(scores):
        raise ValueError(f"{name}: lm-eval scored {len(harness['line_loglikelihood'])} lines, tatu {len(scores)}")
    words = sum(word_count(line.text) for line in eval_set.lines)
    nll = float(scores.nll_sum.sum())
    diffs = [abs(float(a) + b) for a, b in zip(scores.nll_sum, harness["line_loglikelihood"])]
    return HarnessRow(
        name=name, n_lines=len(scores), block_size=block_size,
        n_long=sum(len(line.ids) - 1 > block_size for line in eval_set.lines),
        tatu_bpb=tatu_result.bpb, lm_eval_bpb=harness["bits_per_byte"],
        tatu_byte_ppl=2.0 ** tatu_result.bpb, lm_eval_byte_ppl=harness["byte_perplexity"],
        tatu_word_ppl=math.exp(nll / words), lm_eval_word_ppl=harness["word_perplexity"],
        max_line_nll_diff=max(diffs),
    )


def _score_rows(args: argparse.Namespace, ckpt, specs) -> list[HarnessRow]:
    """Each text set scored by tatu and by lm-eval (through a GPT-2 export of the checkpoint)."""
    from tatu.evals.scoring import evaluate
    from tatu.evals.sets import load_eval_set
    from tatu.model.checkpoint import CheckpointError
    from tatu.model.hf import export_hf, is_hf_dir

    model = ckpt.build_model(args.device)
    block = ckpt.model_config.block_size
    rows: list[HarnessRow] = []
    with tempfile.TemporaryDirectory(prefix="tatu-harness-") as tmp:
        if is_hf_dir(args.checkpoint):
            hf_dir = Path(args.checkpoint)
        else:
            try:
                hf_dir = export_hf(ckpt, Path(tmp) / "hf")
            except CheckpointError as exc:
                raise TatuExit(BAD_DATA, f"{args.checkpoint}: cannot export to GPT-2 for lm-eval: {exc}")
        lm = make_lm(hf_dir, args.device)
        for name, file, kind in specs:
            try:
                eval_set = load_eval_set(file, ckpt.tokenizer, name=name, kind=kind)
            except ValueError as exc:
                raise TatuExit(BAD_DATA, str(exc))
            if eval_set.kind != "text":
                print(f"{name}: skipped: pairs are scored conditionally on their prompts, which "
                      "loglikelihood_rolling (whole documents) cannot express", file=sys.stderr)
                continue
            result = evaluate(model, eval_set, device=args.device, n_resamples=args.resamples, seed=args.seed,
                              token_budget=args.token_budget)
            rows.append(reconcile(name, eval_set, result, score_with_lm_eval(lm, file), block))
    return rows


def _print_rows(rows: list[HarnessRow]) -> None:
    print(f"{'set':<12} {'lines':>6} {'long':>5} {'bpb tatu':>12} {'bpb lm-eval':>12} {'|diff|':>9} "
          f"{'byte_ppl tatu':>14} {'lm-eval':>10} {'word_ppl tatu':>14} {'lm-eval':>10}  rule")
    for r in rows:
        rule = ("matched: every line fits one window" if r.matched else
                f"differs: {r.n_long} lines exceed the {r.block_size}-token context (lm-eval gives their last window more context)")
        print(f"{r.name:<12} {r.n_lines:>6} {r.n_long:>5} {r.tatu_bpb:>12.8f} {r.lm_eval_bpb:>12.8f} "
              f"{abs(r.tatu_bpb - r.lm_eval_bpb):>9.1e} {r.tatu_byte_ppl:>14.6f} {r.lm_eval_byte_ppl:>10.6f} "
              f"{r.tatu_word_ppl:>14.4f} {r.lm_eval_word_ppl:>10.4f}  {rule}")
    print("lm-eval reports no confidence interval for bits_per_byte and no paired comparison; "
          "`tatu eval` and `tatu compare` give both.")


def harness_main(args: argparse.Namespace) -> int:
    """The --harness path of `tatu eval` (see the module docstring)."""
    from tatu.model.checkpoint import CheckpointError
    from tatu.model.hf import load_checkpoint_or_gpt2
    from tatu.ops.eval.inputs import check_device, resolve_bootstrap, set_specs

    try:
        import lm_eval  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise TatuExit(BAD_CONFIG, f"--harness needs transformers and lm-eval: pip install 'tatu[hf]' ({exc})")
    if args.en_batches is not None or args.category:
        raise TatuExit(USAGE, "--harness scores every line of each set, whole: drop --en-batches/--category")
    check_device(args)
    specs = set_specs(args)
    try:
        ckpt = load_checkpoint_or_gpt2(args.checkpoint)
    except CheckpointError as exc:
        raise TatuExit(BAD_DATA, str(exc))
    resolve_bootstrap(args, (args.checkpoint, ckpt.meta))
    rows = _score_rows(args, ckpt, specs)
    if not rows:
        raise TatuExit(BAD_DATA, "--harness: no text eval set to score (pairs sets are skipped)")
    _print_rows(rows)
    if args.json_out is not None:
        payload = {"format": "tatu-harness-1", "checkpoint": str(args.checkpoint), "match_tol": MATCH_TOL,
                   "transformers": _version("transformers"), "lm_eval": _version("lm_eval"),
                   "sets": [{**asdict(r), "matched": r.matched, "agrees": r.agrees} for r in rows]}
        args.json_out.write_text(json.dumps(payload, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        print(f"wrote {args.json_out}")
    broken = [r.name for r in rows if r.matched and not r.agrees]
    if broken:
        print(f"MISMATCH: {', '.join(broken)}: lm-eval's bits_per_byte differs from tatu's by more than {MATCH_TOL} "
              "where the rules match", file=sys.stderr)
        return 1
    return 0

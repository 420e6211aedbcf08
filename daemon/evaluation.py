"""Scheduled evaluation and the decisions taken from it: drift, drift_tronco, best, abort.

drift        = enRuler_ppl / enRuler_ppl at this run's step-0 baseline - 1  (what THIS run did)
drift_tronco = enRuler_ppl / enRuler_ppl of the trunk - 1                (carries the seed's inheritance)
Both come with a paired CI: the same lines are scored at every eval, so the per-line
differences are paired and the interval is far tighter than two independent ones.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from tatu.daemon.config import RunConfig
from tatu.evals.downstream import exact_match
from tatu.evals.scoring import evaluate
from tatu.evals.sets import EvalSet, load_eval_set, subsample
from tatu.evals.stats import paired_ratio
from tatu.evals.words import Dictionary, invented_rate
from tatu.formats import fmt_pct
from tatu.model.chat import encode_prompt

SET_NAMES = ("sftHeld", "ptVal", "enRuler")
RULER = "enRuler"
REFERENCE_SETS = (RULER, "ptVal")  # what a trunk stores for drift_tronco (and a ptVal twin)


def best_set(mode: str) -> str:
    """Best checkpoint by sftHeld only, never by the ruler (a trunk has no SFT: ptVal)."""
    return "sftHeld" if mode == "sft" else "ptVal"


@dataclass
class Suite:
    sets: dict[str, EvalSet]
    notes: dict[str, str]  # e.g. {"enRuler": "16/166 lines"} when subsampled
    file_hashes: dict[str, str]
    gen_pairs: list[tuple[str, str]]
    dictionary: Dictionary | None


def load_suite(config: RunConfig, manifest: dict, tokenizer, log) -> Suite:
    data_dir = config.data
    sets, notes, hashes = {}, {}, {}
    for name in SET_NAMES:
        entry = manifest.get("evals", {}).get(name)
        if entry is None:
            continue
        path = data_dir / entry["file"]
        eval_set = load_eval_set(path, tokenizer, name=name)
        hashes[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        if name == RULER:
            eval_set, note = subsample(eval_set, config.eval_en_all, config.eval_en_batches, config.eval_batch)
            notes[name] = note
        sets[name] = eval_set
    missing = [n for n in (best_set(config.mode), RULER) if n not in sets]
    if missing:
        raise ValueError(f"{data_dir / 'manifest.json'}: eval sets {missing} are required and missing")
    gen_pairs = []
    if "sftHeld" in sets and config.gen_prompts:
        held_file = data_dir / manifest["evals"]["sftHeld"]["file"]
        for line in held_file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                if "prompt" in record:
                    gen_pairs.append((record["prompt"], record["response"]))
            if len(gen_pairs) >= config.gen_prompts:
                break
    dictionary = None
    dict_path = data_dir / "dictionary.json"
    if dict_path.exists():
        dictionary = Dictionary.load(dict_path)
    return Suite(sets, notes, hashes, gen_pairs, dictionary)


def score_suite(model, suite: Suite, device, config: RunConfig, only: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Every set (or those in `only`) scored whole or as declared subsample; per-line sums kept."""
    results = {}
    for name, eval_set in suite.sets.items():
        if only is not None and name not in only:
            continue
        result = evaluate(model, eval_set, device=device, n_resamples=config.eval_resamples, seed=config.seed)
        results[name] = {
            "ppl": result.ppl,
            "lo": result.ci.lo,
            "hi": result.ci.hi,
            "se": result.ci.se,
            "bpc": result.bpc,
            "bpb": result.bpb,
            "n_lines": result.n_lines,
            "n_lines_total": result.n_lines_total,
            "n_tokens": int(result.n_tokens),
            "nll_sum": [float(x) for x in result.scores.nll_sum],
            "line_tokens": [int(x) for x in result.scores.n_tokens],
            "line_index": [int(x) for x in eval_set.line_index],
            "warning": result.warning(),  # EVAL_EN_ALL=0: k/n lines and the SE that buys
        }
    return results


def paired_change(reference: dict, current: dict, config: RunConfig) -> dict:
    """current/reference - 1 over the same lines, with its paired CI, p-value and MDE."""
    paired = paired_ratio(
        np.asarray(reference["nll_sum"]), np.asarray(reference["line_tokens"]),
        np.asarray(current["nll_sum"]), np.asarray(current["line_tokens"]),
        n_resamples=config.eval_resamples, seed=config.seed,
    )
    return {
        "value": current["ppl"] / reference["ppl"] - 1,
        "lo": paired.lo - 1,
        "hi": paired.hi - 1,
        "p_value": paired.p_value,
        "mde": paired.mde,
    }


def reference_for_lines(reference: dict, eval_set: EvalSet, file_sha256: str | None) -> dict | None:
    """The trunk's per-line enRuler scores restricted to the lines scored now.

    None (drift_tronco n/a) when the trunk was scored on another ruler file: a ratio over
    different lines would be a number without a meaning."""
    if reference is None or reference.get("n_lines_total") != eval_set.n_lines_total:
        return None
    if reference.get("file_sha256") and file_sha256 and reference["file_sha256"] != file_sha256:
        return None
    # The reference may itself cover a subsample: map by line index, n/a if a line is missing.
    position = {line: i for i, line in enumerate(reference.get("line_index") or range(len(reference["nll_sum"])))}
    if any(line not in position for line in eval_set.line_index):
        return None
    take = [position[line] for line in eval_set.line_index]
    nll = np.asarray(reference["nll_sum"])[take]
    tok = np.asarray(reference["line_tokens"])[take]
    return {"ppl": float(np.exp(nll.sum() / tok.sum())), "nll_sum": nll.tolist(), "line_tokens": tok.tolist()}


def generate_samples(model, suite: Suite, tokenizer, device, config: RunConfig) -> dict | None:
    """Fixed sftHeld prompts, greedy, one batch: the text, invented words, downstream accuracy."""
    if not suite.gen_pairs:
        return None
    prompts = [encode_prompt(tokenizer, p) for p, _ in suite.gen_pairs]
    was_training = model.training
    model.eval()
    outputs = model.generate(prompts, config.gen_tokens, eos_id=tokenizer.eos_id)
    model.train(was_training)
    texts = [tokenizer.decode(o) for o in outputs]
    accuracy = exact_match(texts, [r for _, r in suite.gen_pairs])
    sample = {
        "samples": [{"prompt": p, "reference": r, "output": t} for (p, r), t in zip(suite.gen_pairs, texts)],
        "accuracy": {"value": accuracy.accuracy, "lo": accuracy.lo, "hi": accuracy.hi, "n": accuracy.n},
        "invented": None,
    }
    if suite.dictionary is not None:
        inv = invented_rate(texts, suite.dictionary)
        sample["invented"] = {"rate": inv.rate, "n_words": inv.n_words, "n_invented": inv.n_invented, "examples": inv.examples[:10]}
    return sample


def eval_line(step: int, results: dict, drift: dict, drift_tronco: dict | None, trunk_ok, best: bool, seconds: float, notes: dict) -> str:
    """The contract line: `EVAL 8: sftHeld 9.0702 ptVal 31.20 enRuler 52.10 drift +0.0% drift_tronco +14.7% trunk_ok=True best=True (71.2s)`."""
    def ppl(name, digits):
        return f"{results[name]['ppl']:.{digits}f}" if name in results else "n/a"

    line = (
        f"EVAL {step}: sftHeld {ppl('sftHeld', 4)} ptVal {ppl('ptVal', 2)} enRuler {ppl('enRuler', 2)} "
        f"drift {fmt_pct(drift['value'])} drift_tronco {fmt_pct(drift_tronco['value'] if drift_tronco else None)} "
        f"trunk_ok={'n/a' if trunk_ok is None else trunk_ok} best={best} ({seconds:.1f}s)"
    )
    # At step 0 the ruler is compared with itself: there is no interval or resolution to show.
    mde = "n/a" if step == 0 else f"{drift['mde'] * 100:.1f}%"
    extras = f" drift_ci=[{fmt_pct(drift['lo'])},{fmt_pct(drift['hi'])}] mde={mde}"
    lines = notes.get(RULER, "").split()[:1]
    if lines and lines[0].split("/")[0] != lines[0].split("/")[-1]:  # only a subsample says so
        extras += f" enRuler_lines={lines[0]}"
    return line + extras


@dataclass
class Decision:
    record: dict  # the eval event (every number)
    line: str
    best: bool
    abort_reason: str | None


def decide(step: int, results: dict, state: dict, suite: Suite, config: RunConfig, seconds: float, samples) -> Decision:
    """Compare with the run's baseline and the trunk; pick best; decide abort (not warn)."""
    baseline = state["baseline"]
    changes = {name: paired_change(baseline[name], results[name], config) for name in results if name in baseline}
    drift = changes[RULER]
    trunk_ref = reference_for_lines((state.get("trunk_reference") or {}).get(RULER), suite.sets[RULER], suite.file_hashes.get(RULER))
    drift_tronco = paired_change(trunk_ref, results[RULER], config) if trunk_ref else None
    if config.trunk_limit is None:
        trunk_ok = True
    else:
        trunk_ok = None if drift_tronco is None else drift_tronco["value"] <= config.trunk_limit
    key = best_set(config.mode)
    best_so_far = state.get("best")
    best = best_so_far is None or results[key]["ppl"] < best_so_far["ppl"]
    abort_reason = None
    if config.mode == "sft":
        measured = drift["lo"] if config.mix_forget_ci else drift["value"]
        if measured > config.mix_forget_limit:
            which = "drift CI lower bound" if config.mix_forget_ci else "drift"
            abort_reason = f"{which} {fmt_pct(measured)} > MIX_FORGET_LIMIT {config.mix_forget_limit * 100:.1f}%"
    line = eval_line(step, results, drift, drift_tronco, trunk_ok, best, seconds, suite.notes)
    record = {
        "step": step,
        "sets": {n: {k: v for k, v in r.items() if k not in ("nll_sum", "line_tokens", "line_index", "warning")} for n, r in results.items()},
        "warnings": [r["warning"] for r in results.values() if r.get("warning")],
        "changes": changes,
        "drift": drift,
        "drift_tronco": drift_tronco,
        "trunk_ok": trunk_ok,
        "best": best,
        "best_set": key,
        "abort": abort_reason,
        "notes": suite.notes,
        "seconds": round(seconds, 3),
        "generations": samples,
        "line": line,
    }
    return Decision(record, line, best, abort_reason)


def trunk_reference(results: dict, suite: Suite) -> dict:
    """What a trunk stores so SFT runs from it can compute drift_tronco (per-line, all lines)."""
    ref = {}
    for name in REFERENCE_SETS:
        if name in results:
            r = results[name]
            ref[name] = {
                "ppl": r["ppl"], "nll_sum": r["nll_sum"], "line_tokens": r["line_tokens"], "line_index": r["line_index"],
                "n_lines_total": r["n_lines_total"], "file_sha256": suite.file_hashes.get(name),
            }
    return ref


__all__ = ["Suite", "load_suite", "score_suite", "decide", "trunk_reference", "best_set"]

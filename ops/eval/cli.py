"""`tatu eval` and `tatu compare`: whole-set perplexity of checkpoints, with CIs, from the shell.

    tatu eval CKPT --set enRuler=en.txt --set sftHeld=held.jsonl [--json OUT]
    tatu compare CKPT_A CKPT_B --set enRuler=en.txt [--json OUT]

Every set is scored on all its lines unless `--en-batches N --batch B` asks, as EVAL_EN_ALL=0
does in the daemon, for N*B lines of the enRuler set drawn by the seed (tatu.evals.sets.sample_lines);
the output then says k/n lines and warns with the SE. `compare` scores both checkpoints on the
same lines and reports the paired ratio B/A: with different tokenizers the ratio is per character
(2 ** (bpc_B - bpc_A)), since per-token perplexities of different tokenizers are not comparable.

The seed (bootstrap and subsample) defaults to the TATU_SEED the checkpoint was trained with
(B's for compare), so the CIs equal those the daemon logged for the same checkpoint.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tatu.data.tags import CATEGORIES as TAG_CATEGORIES
from tatu.evals.masks import WORD_LISTS
from tatu.exitcodes import BAD_DATA, USAGE, TatuExit
from tatu.formats import fmt_interval, fmt_p, fmt_pct, fmt_share
from tatu.ops.eval import tags as eval_tags, tasks as eval_tasks
from tatu.ops.eval.inputs import add_bootstrap_args, check_device, load_model, peek_meta, resolve_bootstrap, set_specs


def _category_list(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    known = dict.fromkeys(TAG_CATEGORIES + tuple(WORD_LISTS))
    for name in names:
        if name not in known:
            renamed = f"the word list is {name}-words; " if f"{name}-words" in WORD_LISTS else ""  # once `content`
            raise argparse.ArgumentTypeError(f"unknown category {name!r} ({renamed}known: {', '.join(known)})")
    return names


def _check_categories(args: argparse.Namespace) -> None:
    """A part-of-speech category needs the tags of a --data dir: refused before any checkpoint
    loads, naming the word list that needs none (the two families share no name)."""
    tagged = [c for group in args.category for c in group if c in TAG_CATEGORIES]
    if tagged and args.data is None:
        raise TatuExit(USAGE, f"--category {tagged[0]}: a part-of-speech category, from the Apertium tags of a "
                              f"--data dir (give --data DIR); without tags use the word lists {', '.join(WORD_LISTS)}")


def _common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=FILE",
                        help="an eval set: a text file (one scored line per line) or pairs JSONL (repeatable)")
    parser.add_argument("--data", type=Path, help="a data dir: score every eval set in its manifest.json")
    parser.add_argument("--json", type=Path, dest="json_out", metavar="OUT",
                        help="also write the results as JSON to OUT (nothing is written without it)")
    parser.add_argument("--device", default="cpu")
    lines = parser.add_mutually_exclusive_group()
    lines.add_argument("--all-lines", action="store_true", help="score every line (the default; EVAL_EN_ALL=1)")
    lines.add_argument("--en-batches", type=int, metavar="N",
                       help="score only N x --batch lines of the enRuler set, drawn by --seed (EVAL_EN_ALL=0)")
    parser.add_argument("--batch", type=int, default=2, help="lines per batch for --en-batches (default 2, as EVAL_BATCH)")
    parser.add_argument("--category", action="append", default=[], type=_category_list, metavar="CAT[,CAT...]",
                        help="also report perplexity (and bpc) on the tokens of a word category (repeatable): "
                             f"the parts of speech {', '.join(TAG_CATEGORIES)} from the tags of a --data dir "
                             "(Apertium, built at data build; see docs/metrics.md), or the fixed word lists "
                             f"{', '.join(WORD_LISTS)} (no tags needed)")
    parser.add_argument("--task", dest="tasks", action="append", default=[], metavar="NAME=FILE",
                        help="a multiple-choice task, JSONL {context, choices, answer}: acc and acc_norm by "
                             "log-likelihood (repeatable; --data adds the data dir's tasks)")
    add_bootstrap_args(parser, "the checkpoint", seed_also=" and subsample")


def add_eval_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", type=Path, help="checkpoint directory or legacy .pt file")
    _common_args(parser)
    parser.add_argument("--harness", action="store_true",
                        help="also score the text sets with lm-evaluation-harness (needs tatu[hf]) and show both")


def add_compare_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint_a", type=Path, help="checkpoint A (the reference)")
    parser.add_argument("checkpoint_b", type=Path, help="checkpoint B (the candidate): ratios are B/A")
    _common_args(parser)


def _score_all(model, tokenizer, specs, args) -> dict[str, list]:
    """name -> [whole-set result, then one result per --category]."""
    from tatu.evals.scoring import evaluate
    from tatu.evals.sets import SUBSAMPLED_SET, load_eval_set, subsample, target_word_masks

    results: dict[str, list] = {}
    for name, file, kind in specs:
        try:
            eval_set = load_eval_set(file, tokenizer, name=name, kind=kind)
            if name == SUBSAMPLED_SET:
                eval_set, _ = subsample(eval_set, args.en_batches is None, args.en_batches or 1, args.batch, args.seed)
        except ValueError as exc:
            raise TatuExit(BAD_DATA, str(exc))
        options = dict(device=args.device, n_resamples=args.resamples, seed=args.seed, token_budget=args.token_budget)
        asked = list(dict.fromkeys(c for group in args.category for c in group))
        units = eval_tags.stored_tags(args, name) if asked else None
        try:
            whole = evaluate(model, eval_set, per_token=units is not None, **options)
            results[name] = [whole]
            by_tags = eval_tags.tag_categories(whole, eval_set, tokenizer, units, asked, args) if units is not None else {}
            for category in asked:
                if category in WORD_LISTS:
                    masks = target_word_masks(eval_set, tokenizer, WORD_LISTS[category])
                    results[name].append(evaluate(model, eval_set, position_mask=masks, category=category, **options))
                elif units is None:
                    raise TatuExit(BAD_DATA, f"--category {category}: set {name} has no tags: {eval_tags.why_untagged(args, name)}")
                elif category in by_tags:  # else no token of the set is of that category
                    results[name].append(by_tags[category])
        except ValueError as exc:
            raise TatuExit(BAD_DATA, f"{file}: {exc}")
    return results


def _label(result) -> str:
    return result.name if result.category is None else f"  {result.name}[{result.category}]"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _write_json(path: Path, payload: dict) -> None:
    try:
        path.write_text(json.dumps(payload, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise TatuExit(BAD_DATA, f"{path}: cannot write JSON ({exc.strerror})")
    print(f"wrote {path}")


def _warn(results: dict[str, list]) -> None:
    for per_set in results.values():
        if per_set[0].blank_note:
            print(f"note: {per_set[0].name}: {per_set[0].blank_note} (blank lines are not scored)")
        warning = per_set[0].warning()
        if warning:
            print(f"warning: {warning}", file=sys.stderr)


def _check_subsample(args: argparse.Namespace, specs) -> None:
    from tatu.evals.sets import SUBSAMPLED_SET

    if args.en_batches is not None and SUBSAMPLED_SET not in [name for name, _, _ in specs]:
        raise TatuExit(USAGE, f"--en-batches subsamples the {SUBSAMPLED_SET} set (as EVAL_EN_BATCHES does in the "
                              f"daemon); no set is named {SUBSAMPLED_SET}: give --set {SUBSAMPLED_SET}=FILE")


def eval_main(args: argparse.Namespace) -> int:
    if args.harness:
        from tatu.ops.harness import harness_main

        return harness_main(args)
    check_device(args)
    _check_categories(args)
    specs = set_specs(args)
    _check_subsample(args, specs)
    model, tokenizer, meta = load_model(args.checkpoint, args.device)
    resolve_bootstrap(args, (args.checkpoint, meta))
    results = _score_all(model, tokenizer, specs, args)
    tasks = eval_tasks.score_tasks(model, tokenizer, args)

    header = f"{'set':<22} {'lines':>9} {'tokens':>9} {'ppl':>10} {'95% CI':>23} {'bpc':>7} {'bpb':>7}"
    print(header)
    for per_set in results.values():
        for r in per_set:
            lines = f"{r.n_lines}/{r.n_lines_total}" if r.category is None else str(r.n_lines)
            ci = fmt_interval(r.ci.lo, r.ci.hi, "{:.4g}".format)
            print(f"{_label(r):<22} {lines:>9} {r.n_tokens:>9} {r.ppl:>10.4g} {ci:>23} {_fmt(r.bpc):>7} {_fmt(r.bpb):>7}")
    _warn(results)
    eval_tasks.print_tasks(tasks)

    if args.json_out is None:  # a file only where asked: a bare `tatu eval` leaves no eval-final.json behind
        return 0
    _write_json(args.json_out, {
        "format": "tatu-eval-1",
        "checkpoint": str(args.checkpoint),
        "tokenizer_hash": tokenizer.hash,
        "seed": args.seed,
        "sets": {name: [r.to_json() for r in per_set] for name, per_set in results.items()},
        "tasks": {name: {**r.summary(), "correct": r.correct.tolist(), "correct_norm": r.correct_norm.tolist(),
                         "loglik": [ll.tolist() for ll in r.loglik]} for name, r in tasks.items()},
    })
    return 0


def fmt_mde(paired) -> str:
    """The MDE, or n/a when A and B scored every line alike (nothing varies: there is no
    resolution to speak of), as the daemon's EVAL line shows it at step 0."""
    return "n/a" if paired.se_log_ratio == 0 else f"{paired.mde:.2%}"


def verdict(paired, per: str, n_resamples: int) -> str:
    """One plain sentence: a change the CI resolves, or 'within resolution'."""
    change, lo, hi = paired.ratio - 1.0, paired.lo - 1.0, paired.hi - 1.0
    unit = "" if per == "token" else " per character"
    if lo <= 0.0 <= hi:
        return (f"within resolution: change {fmt_pct(change)}{unit}, CI {fmt_interval(lo, hi)} includes 0 "
                f"(MDE {fmt_mde(paired)})")
    direction = "better" if change < 0 else "worse"
    p = fmt_p(paired.p_value, n_resamples)
    return f"B is {direction} by {fmt_share(abs(change))}{unit} (CI {fmt_interval(lo, hi)}, p{p if p[0] == '<' else '=' + p})"


def compare_main(args: argparse.Namespace) -> int:
    from tatu.evals.scoring import compare_results

    check_device(args)
    _check_categories(args)
    specs = set_specs(args)
    _check_subsample(args, specs)
    model_a, tok_a, meta_a = load_model(args.checkpoint_a, args.device)
    # B, the candidate, is usually the run being judged (A its seed): its seed first
    resolve_bootstrap(args, (args.checkpoint_b, peek_meta(args.checkpoint_b)), (args.checkpoint_a, meta_a))
    results_a = _score_all(model_a, tok_a, specs, args)
    tasks_a = eval_tasks.score_tasks(model_a, tok_a, args)
    del model_a  # one model in memory at a time
    model_b, tok_b, _ = load_model(args.checkpoint_b, args.device)
    results_b = _score_all(model_b, tok_b, specs, args)
    tasks_b = eval_tasks.score_tasks(model_b, tok_b, args)
    per = "token" if tok_a.hash == tok_b.hash else "char"
    if per == "char" and args.category:
        # A word category selects different tokens under each tokenizer: no per-line pairing exists.
        raise TatuExit(BAD_DATA, "--category needs A and B to share a tokenizer (they differ)")
    if per == "char":
        print("note: A and B use different tokenizers; ratios are per character (2^(bpc_B - bpc_A))")

    print(f"{'set':<22} {'lines':>9} {'ppl A':>10} {'ppl B':>10} {'B/A':>8} {'95% CI':>19} {'p':>7} {'MDE':>7}  verdict")
    rows = {}
    for name in results_a:
        rows[name] = []
        for ra, rb in zip(results_a[name], results_b[name]):
            paired = compare_results(ra, rb, n_resamples=args.resamples, seed=args.seed, per=per)
            text = verdict(paired, per, args.resamples)
            ci = fmt_interval(paired.lo, paired.hi, "{:.4f}".format)
            shown_a, shown_b = (ra.ppl, rb.ppl) if per == "token" else (2 ** ra.bpc, 2 ** rb.bpc)
            lines = f"{len(ra.scores)}/{ra.n_lines_total}" if ra.category is None else str(ra.n_lines)
            print(f"{_label(ra):<22} {lines:>9} {shown_a:>10.4g} "
                  f"{shown_b:>10.4g} {paired.ratio:>8.4f} {ci:>19} {fmt_p(paired.p_value, args.resamples):>7} "
                  f"{fmt_mde(paired):>7}  {text}")
            rows[name].append({
                "category": ra.category, "per": per, "ratio": paired.ratio, "lo": paired.lo, "hi": paired.hi,
                "p_value": paired.p_value, "mde": paired.mde, "se_log_ratio": paired.se_log_ratio,
                "n_lines": paired.n_lines, "verdict": text, "a": ra.to_json(), "b": rb.to_json(),
            })
    _warn(results_a)
    task_rows = eval_tasks.compare_tasks(tasks_a, tasks_b)

    if args.json_out is None:
        return 0
    _write_json(args.json_out, {
        "format": "tatu-compare-1",
        "checkpoint_a": str(args.checkpoint_a),
        "checkpoint_b": str(args.checkpoint_b),
        "seed": args.seed,
        "sets": rows,
        "tasks": task_rows,
    })
    return 0



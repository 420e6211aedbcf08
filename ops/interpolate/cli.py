"""`tatu interpolate`: the straight line between a seed and its fine-tune (WiSE-FT), measured.

    tatu interpolate SEED FINETUNED --data DATA [--alphas 0:1:0.1] [--pick RULE] [--out DIR]

Every eval set of DATA is scored whole at every alpha and paired against alpha 0 (the seed) on
the same lines; the table, REPORT/path.json and REPORT/path.png show learning (sftHeld) against
forgetting (drift). `--pick "largest alpha such that drift_hi < 0.08"` (the sweeps' rule
language) chooses an alpha before anyone sees the result, and `--out DIR` saves it as an ordinary
checkpoint. Everything that can be refused is refused before the first model is scored.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from tatu.model.checkpoint.files import META
from tatu.exitcodes import BAD_CONFIG, NO_CHOICE, USAGE, TatuExit
from tatu.ops.eval.inputs import add_bootstrap_args, check_device, resolve_bootstrap, set_specs
from tatu.ops.interpolate.output import payload, table, write_checkpoint, write_report
from tatu.ops.interpolate.path import check_pair, held_out_names, load_parent, load_sets, score_path
from tatu.ops.interpolate.pick import choose, parse_alphas, parse_pick


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("seed_ckpt", type=Path, metavar="SEED", help="the seed checkpoint (alpha 0)")
    parser.add_argument("finetuned", type=Path, metavar="FINETUNED", help="its fine-tune (alpha 1): a full, top:K or LoRA run's final/")
    parser.add_argument("--data", type=Path, required=True, help="a data dir: every eval set of its manifest is scored")
    parser.add_argument("--alphas", default="0:1:0.1",
                        help="START:STOP:STEP, both ends included, or A,B,C; in [0, 1]; 0 is always scored (default 0:1:0.1)")
    parser.add_argument("--pick", metavar="RULE",
                        help="choose an alpha by a rule fixed beforehand: 'largest alpha such that drift_hi < 0.08' "
                             "(the sweeps' rule language on the axis alpha: docs/interpolation.md)")
    parser.add_argument("--out", type=Path, help="write the picked alpha's checkpoint here (a new directory; needs --pick)")
    parser.add_argument("--report", type=Path, default=Path("interpolation"),
                        help="where path.json and path.png go (default ./interpolation)")
    parser.add_argument("--device", default="cpu")
    add_bootstrap_args(parser, "the fine-tune")


def _check_outputs(args: argparse.Namespace) -> None:
    if args.out is not None and args.pick is None:
        raise TatuExit(USAGE, "--out writes the alpha --pick chooses: give --pick RULE")
    if args.out is not None and args.out.exists():
        raise TatuExit(BAD_CONFIG, f"{args.out}: already exists; give a new directory for the picked checkpoint")
    if args.report.exists() and not args.report.is_dir():
        raise TatuExit(BAD_CONFIG, f"--report {args.report}: exists and is not a directory")


def _bootstrap(args: argparse.Namespace, seed, finetuned) -> dict:
    """The bootstrap seed and resamples, chosen as `tatu compare SEED FINETUNED` chooses them."""
    resolve_bootstrap(args, (finetuned.path, finetuned.ckpt.meta), (seed.path, seed.ckpt.meta))
    return {"seed": args.seed, "resamples": args.resamples}


def main(args: argparse.Namespace) -> int:
    alphas = parse_alphas(args.alphas)
    _check_outputs(args)
    check_device(args)
    args.sets, args.tasks = [], []  # the data dir's sets only: the path is judged on what the runs were judged on
    specs = set_specs(args)
    seed, finetuned = load_parent(args.seed_ckpt), load_parent(args.finetuned)
    check_pair(seed, finetuned)
    held_out = held_out_names([name for name, _, _ in specs])
    variables = finetuned.ckpt.meta.get("config") if isinstance(finetuned.ckpt.meta.get("config"), dict) else {}
    pick = parse_pick(args.pick, held_out, variables, args.finetuned) if args.pick is not None else None
    bootstrap = _bootstrap(args, seed, finetuned)
    sets = load_sets(specs, seed.ckpt.tokenizer)
    options = dict(device=args.device, n_resamples=args.resamples, seed=args.seed, token_budget=args.token_budget)
    print(f"interpolating {args.seed_ckpt} (alpha 0, sha256 {seed.sha256[:12]}) -> {args.finetuned} "
          f"(alpha 1, sha256 {finetuned.sha256[:12]}) at {len(alphas)} alphas on {len(sets)} sets")
    trained = finetuned.ckpt.meta.get("trainable")
    if isinstance(trained, dict) and "line" in trained:  # what moved between the two: the path changes only that
        print(f"the fine-tune's {trained['line']}")
    points = score_path(seed, finetuned, sets, alphas, options)
    print(table(points))
    choice = choose(pick, {p.alpha: p.metrics() for p in points}) if pick is not None else None
    if choice is not None:
        print(choice.line)
        if choice.alpha is None:
            for alpha, failed in choice.failed.items():
                print(f"  alpha {alpha:g}: {'; '.join(failed)}")
            print("nothing written")
            return NO_CHOICE
    document = payload(seed, finetuned, points, bootstrap,
                       None if choice is None else {"rule": args.pick, "alpha": choice.alpha, "line": choice.line})
    write_report(args.report, document, points, None if choice is None else choice.alpha)
    if args.out is not None:
        metrics = next(p.metrics() for p in points if p.alpha == choice.alpha)
        provenance = {"rule": args.pick, "line": choice.line, "data": str(args.data.absolute()),
                      "bootstrap": bootstrap, "metrics": metrics}
        write_checkpoint(args.out, seed, finetuned, choice.alpha, provenance)
        print(f"wrote {args.out} (alpha {choice.alpha:g}; parents' sha256 in its {META})")
    return 0

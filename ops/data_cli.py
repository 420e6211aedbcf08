"""`tatu data build|demo`: the operator's side of data/ (`tatu tokenizer`: ops/tokenizer_cli.py)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tatu.exitcodes import BAD_CONFIG, USAGE, TatuExit


def _err(line: str) -> None:
    print(line, file=sys.stderr)


# ---- tatu data -----------------------------------------------------------------------------

def _named_files(values: list[str] | None, flag: str) -> dict[str, list[str]]:
    named: dict[str, list[str]] = {}
    for value in values or []:
        name, sep, paths = value.partition("=")
        files = [p for p in paths.split(",") if p]
        if not sep or not name or not files:
            raise TatuExit(USAGE, f"{flag} {value!r}: expected NAME=FILE[,FILE...]")
        named.setdefault(name, []).extend(files)
    return named


def add_data_args(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    build = sub.add_parser("build", help="tokenize sources into a data dir (shards + manifest.json)")
    build.add_argument("--tokenizer", required=True, help="tokenizer JSON (from `tatu tokenizer train`)")
    build.add_argument("--out", required=True, help="data dir to write; only a previous build or an empty dir is replaced (atomically)")
    build.add_argument("--text", action="append", metavar="NAME=FILE[,FILE]",
                       help="a text channel (plain text or JSONL sources); repeatable")
    build.add_argument("--sft", action="append", metavar="NAME=FILE[,FILE]",
                       help="an SFT channel of JSONL pairs (prompt/response or messages); repeatable")
    build.add_argument("--eval", action="append", metavar="NAME=FILE",
                       help="an eval set copied verbatim (.jsonl: pairs, else one scored line per line)")
    build.add_argument("--task", action="append", metavar="NAME=FILE",
                       help="a multiple-choice task, JSONL {context, choices, answer}, scored at every eval")
    build.add_argument("--one-per-line", action="store_true",
                       help="text sources hold one document per line (default: blank-line separated)")
    build.add_argument("--on-bad-line", choices=("error", "skip"), default="error",
                       help="a bad SFT/text line stops the build (default) or is skipped and counted")
    build.add_argument("--seq-len", type=int, default=None,
                       help="the training context: SFT and eval pairs longer than one row of it are bad lines "
                            "(required with --sft or a .jsonl --eval)")
    build.add_argument("--progress", choices=("auto", "always", "never"), default="auto")
    build.add_argument("--encoder", choices=("auto", "tiktoken", "tokenizers"), default="auto",
                       help="what encodes text channels: auto = tiktoken when it gives the tokenizer's ids on "
                            "adversarial strings and a sample of the sources (docs/data.md), else tokenizers")
    build.add_argument("--jobs", type=int, default=None,
                       help="worker processes for text channels (default: every core for 16 MB of text or more)")

    demo = sub.add_parser("demo", help="write the offline demo's raw sources (corpora, pairs, eval sets)")
    demo.add_argument("out", help="directory for the source files")
    demo.add_argument("--scale", choices=("demo", "tiny"), default="demo")
    demo.add_argument("--seed", type=int, default=0)


def _data_build(args: argparse.Namespace) -> int:
    from tatu.data.build import BuildSpec, build_data
    from tatu.model.tokenizer import TokenizerError
    from tatu.model.tokenizer_json import load_tokenizer

    evals = _named_files(args.eval, "--eval")
    tasks = _named_files(args.task, "--task")
    for flag, named in (("--eval", evals), ("--task", tasks)):
        for name, files in named.items():
            if len(files) != 1:
                raise TatuExit(USAGE, f"{flag} {name}: one file per eval set or task, got {len(files)}")
    spec = BuildSpec(tokenizer=args.tokenizer, out_dir=args.out, text=_named_files(args.text, "--text"),
                     sft=_named_files(args.sft, "--sft"), evals={n: f[0] for n, f in evals.items()},
                     tasks={n: f[0] for n, f in tasks.items()},
                     one_per_line=args.one_per_line, on_bad_line=args.on_bad_line, seq_len=args.seq_len,
                     encoder=args.encoder, jobs=args.jobs)
    try:
        spec.validate()
        tok = load_tokenizer(args.tokenizer)
    except (ValueError, TokenizerError) as exc:
        raise TatuExit(BAD_CONFIG if isinstance(exc, TokenizerError) else USAGE, str(exc)) from None
    progress = {"auto": None, "always": True, "never": False}[args.progress]
    result = build_data(spec, tok, progress=progress)
    if result.up_to_date:
        print(f"{result.out_dir}: up to date (same sources, tokenizer and options); nothing to do")
        return 0
    for name, count in result.skipped.items():
        lines = result.manifest["channels"][name]["skipped_lines"]["lines"]
        shown = ", ".join(f"{Path(b['path']).name}:{b['line']}" for b in lines[:10])
        more = f" and {count - 10} more" if count > 10 else ""
        _err(f"tatu data build: skipped {count} bad line{'s' * (count != 1)} in channel {name!r}: {shown}{more}")
    for name, channel in result.manifest["channels"].items():
        unit = f"{channel['documents']} documents" if channel["kind"] == "text" else f"{channel['pairs']} pairs"
        print(f"{name} ({channel['kind']}): {unit}, {channel['tokens']} tokens, {channel['targets']} targets")
    from tatu.data.tags import untagged_line

    for name, entry in result.manifest["evals"].items():
        tags = entry.get("tags") or {}
        tagged = (f"; tagged: {tags['units']} units by {tags['package']} in {tags['seconds']:.2f}s"
                  if "file" in tags else "")
        print(f"eval {name} ({entry['kind']}): {entry['lines']} lines{tagged}")
    for name, entry in result.manifest.get("tasks", {}).items():
        print(f"task {name}: {entry['items']} items")
    untagged = untagged_line(result.manifest["evals"])
    if untagged:  # one line however many sets it concerns
        _err(f"tatu data build: {untagged}")
    encoder = result.manifest["encoder"]
    print(f"encoder {encoder['name']} ({encoder['reason']})")
    print(f"wrote {result.out_dir}/manifest.json")
    return 0


def _data_demo(args: argparse.Namespace) -> int:
    from tatu.data.demo.sources import DemoPackagesError, build_demo_sources
    from tatu.ops.packages import ensure_demo_packages

    try:
        ensure_demo_packages()
        record = build_demo_sources(Path(args.out), seed=args.seed, scale=args.scale)
    except DemoPackagesError as exc:
        raise TatuExit(1, str(exc)) from None
    for name in sorted(record.get("files", {})):
        print(f"{Path(args.out) / name}")
    return 0


def data_main(args: argparse.Namespace) -> int:
    if args.action == "build":
        return _data_build(args)
    if args.action == "demo":
        return _data_demo(args)
    _err("usage: tatu data build ... | tatu data demo OUT [--scale demo|tiny] [--seed N]")
    return USAGE

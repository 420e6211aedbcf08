"""What `tatu eval`, `tatu compare` and `tatu eval --harness` read before scoring: the eval sets
asked for (--set, --data's manifest), the device, the checkpoints and the bootstrap seed."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tatu.model.checkpoint.files import CheckpointError, read_meta
from tatu.exitcodes import BAD_DATA, USAGE, TatuExit
from tatu.ops.eval.tasks import task_specs


def add_bootstrap_args(parser: argparse.ArgumentParser, whose: str, seed_also: str = "") -> None:
    """--resamples, --seed and --token-budget, defaulting as the daemon does from `whose` checkpoint."""
    parser.add_argument("--resamples", type=int, default=None,
                        help=f"bootstrap resamples (default: {whose}'s TATU_EVAL_RESAMPLES, else 2000)")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"bootstrap{seed_also} seed (default: {whose}'s TATU_SEED, as the daemon)")
    parser.add_argument("--token-budget", type=int, default=None,
                        help="padded tokens per batch (default: 2048 on CPU, 16384 on CUDA)")


def set_specs(args: argparse.Namespace) -> list[tuple[str, Path, str]]:
    """(name, file, kind) of every set asked for, --data's manifest first."""
    specs: list[tuple[str, Path, str]] = []
    if args.data is not None:
        from tatu.data.manifest import MANIFEST, DataError, load_manifest

        try:
            evals = load_manifest(args.data)["evals"]
            specs += [(name, args.data / entry["file"], entry.get("kind", "auto")) for name, entry in evals.items()]
        except DataError as exc:
            raise TatuExit(BAD_DATA, str(exc))
        except (KeyError, TypeError, AttributeError) as exc:
            raise TatuExit(BAD_DATA, f"{args.data / MANIFEST}: cannot read its eval sets ({exc})")
    for spec in args.sets:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise TatuExit(BAD_DATA, f"--set {spec!r}: expected NAME=FILE")
        specs.append((name, Path(file), "auto"))
    if not specs and not task_specs(args):
        raise TatuExit(BAD_DATA, "no eval set: give --set NAME=FILE (repeatable) or --data DIR")
    names = [name for name, _, _ in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise TatuExit(BAD_DATA, f"eval set name given twice: {', '.join(duplicates)}")
    return specs


def load_model(path: Path, device: str):
    """(model, tokenizer, meta) of a checkpoint; any load error is one line, exit 65."""
    from tatu.model.hf import load_checkpoint_or_gpt2

    try:
        ckpt = load_checkpoint_or_gpt2(path)
        return ckpt.build_model(device), ckpt.tokenizer, ckpt.meta
    except ValueError as exc:  # CheckpointError, TokenizerError, a bad config
        raise TatuExit(BAD_DATA, str(exc).splitlines()[0] if str(exc) else f"{path}: cannot load checkpoint")


def peek_meta(path: Path) -> dict:
    """A checkpoint's meta without loading its weights (they are verified when it is loaded)."""
    from tatu.model.checkpoint import load_checkpoint

    if path.is_dir():
        try:
            return read_meta(path)
        except CheckpointError:  # no tatu checkpoint (a GPT-2 directory) or a corrupt one: refused when loaded
            return {}
    try:  # a legacy single file keeps its meta inside
        return load_checkpoint(path).meta
    except ValueError:
        return {}


def resolve_bootstrap(args: argparse.Namespace, *checkpoints: tuple[Path, dict]) -> None:
    """args.seed and args.resamples: the flag, else what the first checkpoint that records a run
    config was trained with (TATU_SEED, TATU_EVAL_RESAMPLES), else those variables' defaults:
    one default for the daemon and the CLI, so both give one CI. Says which seed on stdout."""
    from tatu.daemon.config import RunConfig

    recorded = next(((path, meta["config"]) for path, meta in checkpoints
                     if isinstance(meta, dict) and isinstance(meta.get("config"), dict)), None)
    source = "--seed" if args.seed is not None else "TATU_SEED's default: no checkpoint records it"
    for attr, variable, field in (("seed", "TATU_SEED", "seed"), ("resamples", "TATU_EVAL_RESAMPLES", "eval_resamples")):
        if getattr(args, attr) is not None:
            continue
        value = recorded[1].get(variable) if recorded else None
        if isinstance(value, int) and not isinstance(value, bool):
            setattr(args, attr, value)
            if attr == "seed":
                source = f"TATU_SEED of {recorded[0]}"
        else:
            setattr(args, attr, RunConfig.model_fields[field].default)
    print(f"seed {args.seed} ({source}), {args.resamples} resamples")


def check_device(args: argparse.Namespace) -> None:
    from tatu.model.device import DeviceError, resolve_device

    try:
        args.device = str(resolve_device(args.device))
    except DeviceError as exc:
        raise TatuExit(USAGE, f"--device {exc}")

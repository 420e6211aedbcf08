"""`tatu run` and `tatu smoke`: the daemon in the foreground, configured by the environment.

Options given here are the same variables (`tatu run --set REPLAY_N=6`), validated alike.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from tatu.exitcodes import BAD_CONFIG, TatuExit


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env-file", type=Path, help="read variables from this file first (a unit's EnvironmentFile)")
    parser.add_argument("--set", action="append", default=[], metavar="VAR=VALUE", help="set a variable (repeatable)")


def add_smoke_args(parser: argparse.ArgumentParser) -> None:
    add_args(parser)
    parser.add_argument("--steps", type=int, default=None,
                        help="MIX_STEPS_LIMIT of the smoke run (default: --set MIX_STEPS_LIMIT=..., else 2)")


def parse_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile reads them (comments, quotes)."""
    values = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TatuExit(BAD_CONFIG, f"{path}: cannot read ({exc})")
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip().replace("_", "").isalnum():
            raise TatuExit(BAD_CONFIG, f"{path}:{number}: expected KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def _environ(args) -> tuple[dict[str, str], dict[str, str]]:
    environ = dict(os.environ)
    if args.env_file:
        environ.update(parse_env_file(args.env_file))
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise TatuExit(BAD_CONFIG, f"--set {item!r}: expected VAR=VALUE")
        overrides[key] = value
    return environ, overrides


def main(args: argparse.Namespace) -> int:
    from tatu.daemon.main import main as daemon_main

    environ, overrides = _environ(args)
    return daemon_main(environ, overrides)


def smoke_main(args: argparse.Namespace) -> int:
    from tatu.daemon.main import main as daemon_main

    environ, overrides = _environ(args)
    if args.steps is not None:
        overrides["MIX_STEPS_LIMIT"] = str(args.steps)
    return daemon_main(environ, overrides, smoke=True)

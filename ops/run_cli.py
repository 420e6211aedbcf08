"""`tatu run` and `tatu smoke`: the daemon in the foreground, configured by the environment.

Options given here are the same variables (`tatu run --set REPLAY_N=6`), validated alike, and
the printed configuration says where each came from ([env], [env-file], [override]).

`tatu smoke --env-file F` runs what the unit would run with F as its EnvironmentFile: the
unit's own Environment= lines, then F, and the instance named by F (`tatu units install`
installs it as %E/tatu/INSTANCE.env; `--instance` when F is named otherwise). The caller's
shell does not count: a stray REPLAY_N exported in the terminal must not make the smoke pass
where the unit would fail.
"""
from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from tatu.envfile import parse_env_file
from tatu.exitcodes import BAD_CONFIG, TatuExit


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env-file", type=Path, help="read variables from this file first (a unit's EnvironmentFile)")
    parser.add_argument("--set", action="append", default=[], metavar="VAR=VALUE", help="set a variable (repeatable)")


def add_smoke_args(parser: argparse.ArgumentParser) -> None:
    add_args(parser)
    parser.add_argument("--instance", help="with --env-file: the unit instance it is installed for (default: its name without .env)")
    parser.add_argument("--steps", type=int, default=None,
                        help="MIX_STEPS_LIMIT of the smoke run (default: --set MIX_STEPS_LIMIT=..., else 2)")


def _overrides(args) -> dict[str, str]:
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise TatuExit(BAD_CONFIG, f"--set {item!r}: expected VAR=VALUE")
        overrides[key] = value
    return overrides


def unit_environment(instance: str, unit: str = "tatu-sft@.service") -> dict[str, str]:
    """The Environment= assignments of the shipped unit, with %i as `instance`."""
    from tatu.ops.units import units_dir

    values = {}
    for line in (units_dir() / unit).read_text().splitlines():
        key, sep, assignments = line.strip().partition("=")
        if sep and key == "Environment":
            for assignment in shlex.split(assignments.replace("%i", instance)):
                name, _, value = assignment.partition("=")
                values[name] = value
    return values


def main(args: argparse.Namespace) -> int:
    from tatu.daemon.main import main as daemon_main

    layers = [("env", dict(os.environ))]
    if args.env_file:
        layers.append(("env-file", parse_env_file(args.env_file)))
    return daemon_main(layers=[*layers, ("override", _overrides(args))], env_file=args.env_file, command="tatu run")


def smoke_main(args: argparse.Namespace) -> int:
    from tatu.daemon.main import main as daemon_main

    overrides = _overrides(args)
    if args.steps is not None:
        overrides["MIX_STEPS_LIMIT"] = str(args.steps)
    if not args.env_file:  # the terminal's own configuration, as `tatu run` would take it
        return daemon_main(layers=[("env", dict(os.environ)), ("override", overrides)], smoke=True, command="tatu smoke")
    instance = args.instance or args.env_file.name.removesuffix(".env")
    layers = [("unit", unit_environment(instance)), ("env-file", parse_env_file(args.env_file)), ("override", overrides)]
    return daemon_main(layers=layers, smoke=True, instance=instance, env_file=args.env_file, command="tatu smoke")

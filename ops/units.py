"""`tatu units install [--run NAME]`: render the unit template and install it for the user manager.

units/tatu-sft@.service is the one unit source. `--run NAME` for a run the repository ships
(units/runs/NAME.env) also writes tatu-sft-NAME.service, the template with its instance (%i)
set to NAME, so the operator's `systemctl --user start tatu-sft-run5` starts run5. A run
installed from --env-file is started as the template's instance, tatu-sft@NAME. The template holds two placeholders,
replaced at install time:
  @TATU_PYTHON@   the interpreter running this command (a venv's bin/python, kept unresolved
                  so the venv's site-packages stay active)
  @TATU_WORKDIR@  the directory the run's relative paths (runs/, data/) are resolved from
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tatu.atomic import write_atomic
from tatu.daemon.config import check_env_file
from tatu.systemctl import SystemctlError, config_home, systemctl_user, unit_env_dir

PLACEHOLDERS = ("@TATU_PYTHON@", "@TATU_WORKDIR@")
TEMPLATE = "tatu-sft@.service"


class UnitsError(RuntimeError):
    pass


@dataclass
class InstallResult:
    written: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)  # user-edited env files left alone
    reloaded: bool = False
    notes: list[str] = field(default_factory=list)  # what was changed on the way (a rewritten TATU_RUN)


def units_dir() -> Path:
    """The unit templates: units/ of the checkout, installed as the data package tatu.units."""
    import tatu.units

    here = Path(tatu.units.__file__).resolve().parent
    if not (here / TEMPLATE).is_file():
        raise UnitsError(f"tatu: unit templates not found in {here}")
    return here


def default_unit_dest(environ=None) -> Path:
    return config_home(environ) / "systemd" / "user"


def installed_workdir(dest: Path | None = None) -> Path | None:
    """The WorkingDirectory the installed run unit was rendered with (where its runs' relative
    TATU_OUT lives); None when no unit is installed."""
    unit = (Path(dest) if dest else default_unit_dest()) / TEMPLATE
    try:
        lines = unit.read_text().splitlines()
    except OSError:
        return None
    value = next((line.partition("=")[2].strip() for line in lines if line.startswith("WorkingDirectory=")), "")
    return Path(value.lstrip("!-").replace("%%", "%")) if value else None


def _unit_path_value(path: Path, what: str) -> str:
    text = str(path)
    if not path.is_absolute():
        raise UnitsError(f"tatu: {what} {text!r} must be an absolute path")
    if any(ch.isspace() or ch in "\"'\\" for ch in text):
        raise UnitsError(f"tatu: {what} {text!r} contains whitespace, quotes or backslashes; "
                         "install from a path without them")
    return text.replace("%", "%%")  # '%' starts a systemd specifier


def render_unit(template: str, python: Path, workdir: Path) -> str:
    rendered = (template.replace("@TATU_PYTHON@", _unit_path_value(python, "python interpreter"))
                .replace("@TATU_WORKDIR@", _unit_path_value(workdir, "working directory")))
    leftover = [p for p in PLACEHOLDERS if p in rendered]
    if "@TATU_" in rendered:
        raise UnitsError(f"tatu: unrendered placeholder left in unit: {leftover or '@TATU_...'}")
    return rendered


def _write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)
    return True


def _env_value(raw: str) -> str:
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value


def env_for_instance(text: str, run: str, source: Path) -> tuple[str, str | None]:
    """The env file with every TATU_RUN that names another run rewritten to `run`.

    EnvironmentFile= is read after Environment=, so a `TATU_RUN=run5` copied into run7's env
    file would make tatu-sft@run7 train (or resume) runs/run5. Returns (text, note or None).
    """
    lines, contradicted = [], []
    for line in text.splitlines(keepends=True):
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "TATU_RUN" and _env_value(value) != run:
            contradicted.append(_env_value(value))
            ending = "\n" if line.endswith("\n") else ""
            lines.append(f"# tatu units install: {source} said TATU_RUN={_env_value(value)}; the instance is {run}\n")
            lines.append(f"TATU_RUN={run}{ending}")
        else:
            lines.append(line)
    if not contradicted:
        return text, None
    note = (f"tatu: {source} sets TATU_RUN={', '.join(contradicted)}, which contradicts the run {run!r}: "
            f"installed with TATU_RUN={run} (the instance name decides the run directory)")
    return "".join(lines), note


def install_units(run: str | None = None, dest: Path | None = None, env_dest: Path | None = None,
                  reload: bool = True, env_file: Path | None = None, workdir: Path | None = None,
                  python: Path | None = None, overwrite_env: bool = False) -> InstallResult:
    """Render every units/*.service into `dest`; with `run`, install its env file too; reload."""
    source = units_dir()
    dest = Path(dest) if dest else default_unit_dest()
    env_dest = Path(env_dest) if env_dest else unit_env_dir()
    python = Path(python) if python else Path(sys.executable)
    workdir = (Path(workdir) if workdir else Path.cwd()).absolute()
    result = InstallResult()

    env_source = None
    if run is not None:
        if not run or "/" in run or run.startswith("."):
            raise UnitsError(f"tatu: run name {run!r} must be a plain name")
        env_source = Path(env_file) if env_file else source / "runs" / f"{run}.env"
        if not env_source.is_file():
            raise UnitsError(f"tatu: no env file for run {run!r}: {env_source} does not exist "
                             f"(write one, or pass --env-file)")
        check_env_file(env_source)  # tatu's variables only, before anything is installed (78 naming the line)

    units = {path.name: path.read_text() for path in sorted(source.glob("*.service"))}
    template = units[TEMPLATE]
    if run is not None and env_file is None:
        units[dedicated_unit_name(run)] = dedicated_unit(template, run)
    for name, text in units.items():
        target = dest / name
        if _write_if_changed(target, render_unit(text, python, workdir)):
            result.written.append(target)

    if env_source is not None:
        target = env_dest / f"{run}.env"
        text, note = env_for_instance(env_source.read_text(), run, env_source)
        if note is not None:
            result.notes.append(note)
        if target.is_file() and target.read_text() != text and not overwrite_env:
            result.kept.append(target)
        elif _write_if_changed(target, text):
            os.chmod(target, 0o600)  # may hold paths and tokens; the manager reads it as this user
            result.written.append(target)
        os.chmod(env_dest, 0o700)

    if reload:
        systemctl_user("daemon-reload")
        result.reloaded = True
    return result


def dedicated_unit_name(run: str) -> str:
    return f"tatu-sft-{run}.service"


def dedicated_unit(template: str, run: str) -> str:
    """The template with its instance name fixed to `run` (run names hold no '%')."""
    body = template[template.index("[Unit]"):]  # the template's own usage comment does not apply
    header = (f"# Generated by `tatu units install --run {run}` from {TEMPLATE}: edit that, not this.\n"
              f"#   systemctl --user start tatu-sft-{run}      journalctl --user -u tatu-sft-{run} -f\n")
    return header + body.replace("%i", run)


def add_units_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("action", choices=["install"], help="install: render the units and reload the user manager")
    parser.add_argument("--run", help="also install units/runs/RUN.env as $XDG_CONFIG_HOME/tatu/RUN.env")
    parser.add_argument("--env-file", type=Path, help="env file to install for --run instead of units/runs/RUN.env")
    parser.add_argument("--force-env", action="store_true", help="overwrite an installed env file that differs")
    parser.add_argument("--workdir", type=Path, help="WorkingDirectory of the units (default: the current directory)")
    parser.add_argument("--dest", type=Path, help="unit directory (default: $XDG_CONFIG_HOME/systemd/user)")
    parser.add_argument("--env-dest", type=Path, help="env file directory (default: $XDG_CONFIG_HOME/tatu)")
    parser.add_argument("--no-reload", action="store_true", help="skip systemctl --user daemon-reload")
    return parser


def units_main(args: argparse.Namespace) -> int:
    try:
        result = install_units(run=args.run, dest=args.dest, env_dest=args.env_dest, reload=not args.no_reload,
                               env_file=args.env_file, workdir=args.workdir, overwrite_env=args.force_env)
    except (UnitsError, SystemctlError, OSError, subprocess.TimeoutExpired) as exc:
        print(exc, file=sys.stderr)
        return 1
    for note in result.notes:
        print(note, file=sys.stderr)
    for path in result.written:
        print(f"wrote {path}")
    for path in result.kept:
        print(f"kept {path} (differs from the repo's; --force-env replaces it)")
    if not result.written and not result.kept:
        print("units already up to date")
    if result.reloaded:
        print("reloaded the user manager")
    if args.run:
        unit = f"tatu-sft-{args.run}" if args.env_file is None else f"tatu-sft@{args.run}"
        print(f"start: systemctl --user start {unit}   follow: journalctl --user -u {unit} -f")
    return 0

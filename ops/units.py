"""`tatu units install [--run NAME]`: render the unit templates and install them for the user manager.

units/tatu-sft@.service is the one run unit source. `--run NAME` installs the operator's env
file for the run: `--env-file FILE` copied to %E/tatu/NAME.env, or without it the one already
there (%E/tatu/NAME.env, %E being $XDG_CONFIG_HOME, ~/.config by default); the run is started as
the template's instance, tatu-sft@NAME. A run the repository ships as an example
(units/runs/NAME.env) is installed only when asked by name (`--example`), and also gets
tatu-sft-NAME.service, the template with its instance (%i) set to NAME. The templates hold
placeholders, replaced at install time:
  @TATU_PYTHON@   the interpreter running this command (a venv's bin/python, kept unresolved
                  so the venv's site-packages stay active)
  @TATU_BIN@      the `tatu` command installed beside it: a unit runs a tatu subcommand, which
                  stays where it is when the modules behind it move (`tatu sweep coordinate`)
  @TATU_WORKDIR@  the directory the run's relative paths (runs/, data/) are resolved from
With no user manager to reload, everything is still written, and the line says what was
written, what failed and the command that finishes it (exit 1, NO_MANAGER).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tatu.atomic import write_atomic
from tatu.daemon.config import ConfigError, check_env_file
from tatu.exitcodes import BAD_CONFIG, CRASH, NO_MANAGER
from tatu.systemctl import SystemctlError, config_home, systemctl_user, unit_env_dir

PLACEHOLDERS = ("@TATU_PYTHON@", "@TATU_BIN@", "@TATU_WORKDIR@")
TEMPLATE = "tatu-sft@.service"
PREFIX = "tatu units install: "


class UnitsError(RuntimeError):
    """An install refused before anything is written: the line, and its exit code (78: the env
    file or a path; 1: the checkout's unit templates are missing)."""

    def __init__(self, message: str, code: int = BAD_CONFIG):
        super().__init__(message)
        self.code = code


@dataclass
class InstallResult:
    written: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)  # user-edited env files left alone
    reloaded: bool = False
    reload_error: str | None = None  # systemctl's own message when no user manager read the units
    notes: list[str] = field(default_factory=list)  # what was changed on the way (a rewritten TATU_RUN)
    env_source: Path | None = None  # the env file the run's was installed from


def units_dir() -> Path:
    """The unit templates: units/ of the checkout, installed as the data package tatu.units."""
    import tatu.units

    here = Path(tatu.units.__file__).resolve().parent
    if not (here / TEMPLATE).is_file():
        raise UnitsError(f"{PREFIX}unit templates not found in {here}: reinstall tatu (make venv)", CRASH)
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
        raise UnitsError(f"{PREFIX}{what} {text!r} must be an absolute path")
    if any(ch.isspace() or ch in "\"'\\" for ch in text):
        raise UnitsError(f"{PREFIX}{what} {text!r} contains whitespace, quotes or backslashes; "
                         "install from a path without them")
    return text.replace("%", "%%")  # '%' starts a systemd specifier


def tatu_beside(python: Path) -> Path:
    """The `tatu` command pip installed beside the interpreter (the venv's bin/tatu)."""
    return Path(python).parent / "tatu"


def render_unit(template: str, python: Path, workdir: Path) -> str:
    rendered = (template.replace("@TATU_PYTHON@", _unit_path_value(python, "python interpreter"))
                .replace("@TATU_BIN@", _unit_path_value(tatu_beside(python), "tatu command"))
                .replace("@TATU_WORKDIR@", _unit_path_value(workdir, "working directory")))
    leftover = [p for p in PLACEHOLDERS if p in rendered]
    if "@TATU_" in rendered:
        raise UnitsError(f"{PREFIX}unrendered placeholder left in unit: {leftover or '@TATU_...'}", CRASH)
    return rendered


def rendered_units(python: Path, workdir: Path) -> dict[str, str]:
    """Every shipped template as this checkout renders it: what an install writes."""
    source = units_dir()
    return {path.name: render_unit(path.read_text(), python, workdir) for path in sorted(source.glob("*.service"))}


def outdated_units(dest: Path | None = None, python: Path | None = None) -> list[str]:
    """The installed templates that differ from what this checkout would install now (an update
    changed a template, or what it runs, since `tatu units install`): they run the old text until
    it runs again. Compared with the installed units' own working directory."""
    dest = Path(dest) if dest else default_unit_dest()
    workdir = installed_workdir(dest)
    if workdir is None:
        return []
    current = rendered_units(Path(python) if python else Path(sys.executable), workdir)
    return [name for name, text in current.items()
            if (dest / name).is_file() and (dest / name).read_text() != text]


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
    note = (f"{PREFIX}{source} sets TATU_RUN={', '.join(contradicted)}, which contradicts the run {run!r}: "
            f"installed with TATU_RUN={run} (the instance name decides the run directory)")
    return "".join(lines), note


def install_units(run: str | None = None, dest: Path | None = None, env_dest: Path | None = None,
                  reload: bool = True, env_file: Path | None = None, workdir: Path | None = None,
                  python: Path | None = None, overwrite_env: bool = False, example: bool = False) -> InstallResult:
    """Render every units/*.service into `dest`; with `run`, install its env file too; reload.

    The run's env file: `env_file`, copied to env_dest/RUN.env; without it the one already at
    env_dest/RUN.env (the operator's, checked where it lies); with `example`, the repository's
    units/runs/RUN.env. A reload that fails leaves everything written: result.reload_error says why."""
    source = units_dir()
    dest = Path(dest) if dest else default_unit_dest()
    env_dest = Path(env_dest) if env_dest else unit_env_dir()
    python = Path(python) if python else Path(sys.executable)
    workdir = (Path(workdir) if workdir else Path.cwd()).absolute()
    result = InstallResult()

    env_source = None
    if example and (run is None or env_file is not None):
        raise UnitsError(f"{PREFIX}--example installs the repository's units/runs/RUN.env: give --run RUN "
                         f"and no --env-file")
    if run is not None:
        if not run or "/" in run or run.startswith("."):
            raise UnitsError(f"{PREFIX}--run {run!r}: a run name is a plain name (no '/', not starting with '.')")
        env_source = (Path(env_file) if env_file else source / "runs" / f"{run}.env" if example
                      else env_dest / f"{run}.env")
        if not env_source.is_file():
            if example:
                shipped = sorted(p.stem for p in (source / "runs").glob("*.env"))
                raise UnitsError(f"{PREFIX}--example --run {run}: the repository ships no {run}.env "
                                 f"(examples: {', '.join(shipped)})")
            if env_file:
                raise UnitsError(f"{PREFIX}--env-file {env_source}: no such file")
            raise UnitsError(f"{PREFIX}--run {run}: no env file {env_source}: write the run's variables "
                             f"there (docs/your-own-run.md), or pass --env-file FILE to copy one")
        check_env_file(env_source)  # tatu's variables only, before anything is installed (78 naming the line)

    units = {path.name: path.read_text() for path in sorted(source.glob("*.service"))}
    template = units[TEMPLATE]
    if run is not None and example:
        units[dedicated_unit_name(run)] = dedicated_unit(template, run)
    for name, text in units.items():
        target = dest / name
        if _write_if_changed(target, render_unit(text, python, workdir)):
            result.written.append(target)

    result.env_source = env_source
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
        try:
            systemctl_user("daemon-reload")
            result.reloaded = True
        except (SystemctlError, subprocess.TimeoutExpired) as exc:
            result.reload_error = str(exc).removeprefix("tatu: ")
    return result


def run_unit(run: str, example: bool) -> str:
    """The unit an installed run is started as."""
    return f"tatu-sft-{run}" if example else f"tatu-sft@{run}"


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
    parser.add_argument("--run", help="also install the run's env file: --env-file, else the one at "
                                      "$XDG_CONFIG_HOME/tatu/RUN.env (checked where it lies)")
    parser.add_argument("--env-file", type=Path, help="your env file for --run: copied to $XDG_CONFIG_HOME/tatu/RUN.env")
    parser.add_argument("--example", action="store_true", help="--run RUN is the repository's example units/runs/RUN.env")
    parser.add_argument("--force-env", action="store_true", help="overwrite an installed env file that differs")
    parser.add_argument("--workdir", type=Path, help="WorkingDirectory of the units (default: the current directory)")
    parser.add_argument("--dest", type=Path, help="unit directory (default: $XDG_CONFIG_HOME/systemd/user)")
    parser.add_argument("--env-dest", type=Path, help="env file directory (default: $XDG_CONFIG_HOME/tatu)")
    parser.add_argument("--no-reload", action="store_true", help="skip systemctl --user daemon-reload")
    return parser


def no_manager_line(result: InstallResult) -> str:
    """What was written, what failed, and the one command that finishes the install."""
    written = ", ".join(str(p) for p in result.written) or "nothing new (the units were up to date)"
    return (f"{PREFIX}wrote {written}; but no user manager read them: {result.reload_error}; "
            f"fix: `systemctl --user daemon-reload` in a login session of this user (XDG_RUNTIME_DIR set; "
            f"without one, `loginctl enable-linger $USER` first), or `tatu doctor`")


def units_main(args: argparse.Namespace) -> int:
    try:
        result = install_units(run=args.run, dest=args.dest, env_dest=args.env_dest, reload=not args.no_reload,
                               env_file=args.env_file, workdir=args.workdir, overwrite_env=args.force_env,
                               example=getattr(args, "example", False))
    except UnitsError as exc:
        print(exc, file=sys.stderr)
        return exc.code
    except ConfigError as exc:  # the env file's names, checked before anything is written (FILE:LINE)
        print(f"{PREFIX}{exc}", file=sys.stderr)
        return BAD_CONFIG
    except OSError as exc:
        print(f"{PREFIX}{exc.filename or ''}: {exc.strerror or exc}; nothing was reloaded", file=sys.stderr)
        return CRASH
    for note in result.notes:
        print(note, file=sys.stderr)
    if result.reload_error is not None:
        print(no_manager_line(result), file=sys.stderr)
        return NO_MANAGER
    for path in result.written:
        print(f"wrote {path}")
    for path in result.kept:
        print(f"kept {path} (differs from {result.env_source}; --force-env replaces it)")
    if not result.written and not result.kept:
        print("units already up to date")
    if result.reloaded:
        print("reloaded the user manager")
    if args.run:
        unit = run_unit(args.run, getattr(args, "example", False))
        print(f"start: systemctl --user start {unit}   follow: journalctl --user -u {unit} -f")
    return 0

"""The `tatu sweep ...` commands tatu prints as a next step, written to work where they are printed:
`--sweeps DIR` whenever the sweep's directory is not ./sweeps/NAME of the current directory (the
CLI's default), so a line pasted from the same shell finds the same sweep."""
from __future__ import annotations

import shlex
from pathlib import Path

DEFAULT_SWEEPS = Path("sweeps")  # `--sweeps`'s default, relative to the current directory


def sweeps_option(sweep_dir: Path) -> str:
    """'' when `sweep_dir` is ./sweeps/NAME here, else ' --sweeps DIR' (absolute: it works from anywhere)."""
    parent = Path(sweep_dir).absolute().parent
    return "" if parent == DEFAULT_SWEEPS.absolute() else f" --sweeps {shlex.quote(str(parent))}"


def sweep_command(verb: str, sweep_dir: Path, target: str | None = None) -> str:
    """`tatu sweep VERB TARGET [--sweeps DIR]`; TARGET defaults to the sweep's name (a plan file for
    `plan` and `start`)."""
    sweep_dir = Path(sweep_dir)
    return f"tatu sweep {verb} {target or sweep_dir.name}{sweeps_option(sweep_dir)}"

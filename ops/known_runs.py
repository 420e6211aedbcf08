"""The run directories `tatu status` knows without a daemon to ask, where it looks in this order:

  --out DIR        the directory asked for (then nowhere else)
  $TATU_OUT        a shell set up for a run
  the units' runs  TATU_OUT of each installed env file, %E/tatu/NAME.env (runs/ when unset),
                   under the WorkingDirectory the units were installed with
  runs/            TATU_OUT's default, in the current directory
  demo/runs/       `make demo`'s, in the current directory

A run is named by its directory's name (TATU_RUN), or given as the path of its directory; a sweep's
member (NAME.MEMBER, its folder's name) is found in sweeps/NAME/runs/ or demo/sweeps/NAME/runs/
(`tatu sweep status` lists a sweep's members).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from tatu.daemon.ci_covers import SweepOf
from tatu.daemon.config import RunConfig
from tatu.daemon.run.view import is_run_dir
from tatu.envfile import EnvFileError, parse_env_file
from tatu.ops.units import installed_workdir
from tatu.systemctl import unit_env_dir

DEFAULT_OUT = Path(RunConfig.model_fields["out"].default)
DEMO_OUT = Path("demo")  # `make demo`'s directory, under the one it runs in (ops/demo.py's --out default)
# `tatu sweep`'s default --sweeps, here and under `make demo`'s directory
SWEEPS_DIRS = (Path("sweeps"), DEMO_OUT / "sweeps")


@dataclass(frozen=True)
class RunsDir:
    path: Path  # absolute
    why: str  # where tatu learned of it, as the list says it


def _units_runs(environ: Mapping[str, str]) -> list[RunsDir]:
    env_dir = unit_env_dir(environ)
    workdir = installed_workdir()
    found = []
    for env_file in sorted(env_dir.glob("*.env")) if env_dir.is_dir() else []:
        try:
            out = Path(parse_env_file(env_file).get("TATU_OUT") or DEFAULT_OUT)
        except EnvFileError:
            continue
        if not out.is_absolute():
            if workdir is None:
                continue
            out = workdir / out
        found.append(RunsDir(out, f"TATU_OUT of {env_file}"))
    return found


def runs_dirs(out: Path | None = None, environ: Mapping[str, str] | None = None) -> list[RunsDir]:
    """The existing directories of runs, in the order above, each once."""
    env = os.environ if environ is None else environ
    if out is not None:
        candidates = [RunsDir(Path(out).absolute(), "--out")]
    else:
        candidates = [*([RunsDir(Path(env["TATU_OUT"]).absolute(), "TATU_OUT")] if env.get("TATU_OUT") else []),
                      *_units_runs(env), RunsDir(DEFAULT_OUT.absolute(), "TATU_OUT's default"),
                      RunsDir((DEMO_OUT / DEFAULT_OUT).absolute(), "make demo's")]
    seen, kept = set(), []
    for candidate in candidates:
        key = candidate.path.resolve()
        if key not in seen and candidate.path.is_dir():
            seen.add(key)
            kept.append(candidate)
    return kept


def run_dirs(dirs: list[RunsDir]) -> list[Path]:
    """Every run directory in `dirs`, in their order, by name within each."""
    return [path for d in dirs for path in sorted(d.path.iterdir()) if is_run_dir(path)]


def find_run(run: str, dirs: list[RunsDir]) -> Path | None:
    """The run directory `run` names: a path to one, else the first of `dirs` that holds it."""
    given = Path(run)
    if (os.sep in run or given.is_absolute()) and is_run_dir(given):
        return given.absolute()
    if os.sep in run:
        return None
    found = next((d.path / run for d in dirs if is_run_dir(d.path / run)), None)
    if found is None and "." in run:
        members = [SweepOf.member_dir(sweeps, run).absolute() for sweeps in SWEEPS_DIRS]
        found = next((path for path in members if is_run_dir(path)), None)
    return found

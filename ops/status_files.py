"""`tatu status` when no daemon answers: what a run's directory says happened (daemon/run/view.py),
in a few lines, with the command that goes on from there, and the list of the runs tatu knows
(ops/known_runs.py).

Every command printed here works pasted in the directory `tatu status` ran in: paths are absolute,
and a run whose TATU_OUT is relative is resumed from the directory it was relative to (`cd DIR &&`).
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TextIO

from tatu.daemon.ci_covers import sweep_of
from tatu.daemon.config import ConfigError, RunConfig, load_config
from tatu.daemon.run.view import (ABORTED, DIVERGED, FATAL, FINISHED, NOT_STARTED, RUNNING, STOPPED, RunView,
                                  read_run, verdict_reason)
from tatu.daemon.run.paths import RunDir
from tatu.data.replay import ReplaySources
from tatu.envfile import EnvFileError, env_value, parse_env_file
from tatu.exitcodes import NO_ANSWER, TatuExit
from tatu.ops.known_runs import DEFAULT_OUT, RunsDir, find_run, run_dirs, runs_dirs


def _progress(outcome: RunView) -> str:
    return f"step {outcome.step}/{outcome.limit if outcome.limit is not None else '?'}"


def _matching_env_file(outcome: RunView) -> Path | None:
    """An env file that gives exactly this run's configuration: the one the run was started with, or
    the one written beside its directory (TATU_OUT/<run>.env, the demo's)."""
    started = outcome.started
    for candidate in (started.env_file, RunDir(outcome.run_dir).env_file):
        if candidate is None or not Path(candidate).is_file():
            continue
        try:
            if load_config(parse_env_file(Path(candidate)))[0].to_json() == started.config:
                return Path(candidate)
        except (ConfigError, EnvFileError):
            continue
    return None


def _set_flags(config: dict) -> str:
    """`--set VAR=VALUE` for every setting the run did not leave at its default."""
    defaults = RunConfig.defaults_json()
    flags = []
    for name, value in config.items():
        if value is None or (name in defaults and value == defaults[name]):
            continue
        text = ("1" if value else "0") if isinstance(value, bool) else env_value(value)
        flags.append(f"--set {shlex.quote(f'{name}={text}')}")
    return " ".join(flags)


def _from_where(outcome: RunView, cwd: Path) -> str:
    """`cd DIR && ` when the run's TATU_OUT is relative to a directory other than `cwd`."""
    out = Path(str(outcome.started.config.get("TATU_OUT") or DEFAULT_OUT))
    if out.is_absolute():
        return ""
    parent = outcome.run_dir.parent
    base = Path(*parent.parts[: len(parent.parts) - len(out.parts)])
    return "" if base == cwd.absolute() else f"cd {shlex.quote(str(base))} && "


def next_command(outcome: RunView, cwd: Path) -> str | None:
    """The command that goes on from here: a stopped run's resume (the way it was started), a smoke's
    start-over, a sweep member's sweep status; None when there is none to print."""
    started = outcome.started
    if started is None or outcome.state not in (STOPPED, NOT_STARTED):
        return None
    member = sweep_of(outcome.run, outcome.run_dir.parent)
    if member is not None:  # its sweep's coordinator starts and resumes it
        return f"tatu sweep status {member.name} --sweeps {member.sweeps}"
    if started.by == "instance":
        return f"systemctl --user start {'tatu-sft-ddp' if started.ranks > 1 else 'tatu-sft'}@{outcome.run}"
    if started.ranks > 1:
        return None  # torchrun's own command line, on as many ranks: not in the run's files
    env_file = _matching_env_file(outcome)
    if started.by == "smoke":
        return f"tatu smoke --env-file {shlex.quote(str(env_file))}" if env_file else None
    run = f"tatu run --env-file {shlex.quote(str(env_file))}" if env_file else f"tatu run {_set_flags(started.config)}"
    return _from_where(outcome, cwd) + run


def describe(outcome: RunView, cwd: Path) -> list[str]:
    """A few lines: the state, why, what the verdict said, what goes on from here, where the files are."""
    run, files = outcome.run, RunDir(outcome.run_dir)
    command = next_command(outcome, cwd)
    lines = []
    if outcome.state == RUNNING:
        lines.append(f"{run}  running: pid {outcome.holder} holds its run directory, and its control socket does not "
                     f"answer yet (loading, or saving); `tatu status {run}` again in a moment")
    elif outcome.state == FINISHED:
        lines.append(f"{run}  finished at {_progress(outcome)} (exit 0): its verdict is in {files.verdict_file}")
    elif outcome.state in (ABORTED, DIVERGED, FATAL):
        lines.append(f"{run}  {outcome.state} at {_progress(outcome)} (exit {outcome.code}): {outcome.reason}")
    elif outcome.state == STOPPED:
        saved = f", its resume state saved at step {outcome.saved_step}" if outcome.saved_step is not None else ""
        lines.append(f"{run}  stopped at {_progress(outcome)}{saved}: resumable")
    else:
        lines.append(f"{run}  not started: its directory holds nothing to resume (stopped before its baseline eval)")
    sources = (outcome.started.config or {}).get("REPLAY_SOURCES") if outcome.started is not None else None
    if sources:  # where its replay came from (the step events' replay_tokens say what each step read)
        lines.append(f"replay  {ReplaySources.parse(sources).describe()} of the replay micro-batches (REPLAY_SOURCES)")
    if outcome.verdict is not None:
        lines.append(f"verdict {verdict_reason(outcome.verdict)}")
        covers = (outcome.verdict.ci_covers or {}).get("text")
        if covers:
            lines.append(f"covers  {covers}")
    if outcome.state == ABORTED:
        lines.append("next    an abort by MIX_FORGET_LIMIT is final (a restart exits 10 again): start a new TATU_RUN")
    elif outcome.state == DIVERGED:
        lines.append(f"next    the last saved state (step {outcome.saved_step}) is intact; a restart meets the same "
                     "numbers: start a new TATU_RUN with another configuration")
    elif outcome.state == FATAL:
        lines.append("next    fix what the reason names (its data or configuration), then start it again")
    if command is not None:
        member = sweep_of(run, outcome.run_dir.parent) is not None
        label = "sweep  " if member else "again  " if outcome.started.by == "smoke" else "resume "
        lines.append(f"{label} {command}")
    elif outcome.state == STOPPED and outcome.started is not None and outcome.started.ranks > 1:
        lines.append(f"resume  as it was started, on {outcome.started.ranks} ranks (torchrun, WORLD_SIZE="
                     f"{outcome.started.ranks})")
    weights = [name for name, path in (("final/", files.final), ("best/", files.best)) if path.is_dir()]
    lines.append(f"run dir {files.path}" + (f"  (weights: {' and '.join(weights)})" if weights else ""))
    return lines


def outcome_json(outcome: RunView, cwd: Path) -> dict:
    return {**outcome.to_json(), "next": next_command(outcome, cwd), "source": "run directory"}


def list_lines(outcomes: list[RunView], dirs: list[RunsDir], live: list[str]) -> list[str]:
    """The runs tatu knows: the live daemons' and each known run directory's, one line each."""
    lines = [f"{name:<24} running   (its daemon answers: `tatu status {name}`)" for name in live]
    for outcome in outcomes:
        if outcome.run in live:
            continue
        said = outcome.verdict.outcome if outcome.verdict is not None else ""
        lines.append(f"{outcome.run:<24} {outcome.state:<11} {_progress(outcome):<14} {said:<12} {outcome.run_dir}")
    looked = ", ".join(f"{d.path} ({d.why})" for d in dirs) or "no runs directory"
    return [*lines, f"(looked in {looked}; named, a run says more)"]


def _looked(dirs: list[RunsDir]) -> str:
    return ", ".join(str(d.path) for d in dirs) or f"no runs directory ({DEFAULT_OUT.absolute()} does not exist)"


def run_status(run: str, out_dir: Path | None, as_json: bool, out: TextIO, socket: Path | None = None) -> int:
    """`tatu status RUN` with no daemon answering: the run's directory, exit 0; a run tatu cannot find
    anywhere it looks is TatuExit(NO_ANSWER) with its one line."""
    dirs = runs_dirs(out_dir)
    found = find_run(run, dirs)
    if found is None:
        where = f"no daemon answers at {socket}, and " if socket is not None else ""
        raise TatuExit(NO_ANSWER, f"no run {run}: {where}no run directory {run} in {_looked(dirs)}; "
                                  "`tatu status` lists the runs it knows, `--out DIR` looks in DIR")
    outcome = read_run(found)
    cwd = Path.cwd()
    text = json.dumps(outcome_json(outcome, cwd), indent=2, sort_keys=True) if as_json else "\n".join(describe(outcome, cwd))
    print(text, file=out)
    return 0


def known_status(out_dir: Path | None, live: list[str], as_json: bool, out: TextIO) -> int:
    """`tatu status` with no run named and not exactly one daemon answering: every run tatu knows;
    TatuExit(NO_ANSWER) when it knows none."""
    dirs = runs_dirs(out_dir)
    outcomes = [read_run(path) for path in run_dirs(dirs)]
    if not outcomes and not live:
        raise TatuExit(NO_ANSWER, f"no runs: no daemon answers and no run directory in {_looked(dirs)}; "
                                  "`--out DIR` looks in DIR")
    cwd = Path.cwd()
    if as_json:
        print(json.dumps({"running": live, "runs": [outcome_json(o, cwd) for o in outcomes if o.run not in live]},
                         indent=2, sort_keys=True), file=out)
    else:
        print("\n".join(list_lines(outcomes, dirs, live)), file=out)
    return 0

"""`tatu tensorboard RUN_OR_SWEEP... [--out DIR]`: TensorBoard event files from what runs and
sweeps already hold, for runs made before TensorBoard was on (or with TATU_TENSORBOARD=off).

    tatu tensorboard runs/run5 sweeps/forgetting   # then: tensorboard --logdir_spec run5:runs/run5,forgetting:sweeps/forgetting

The same writer as the daemon's (tatu.tensorboard): a run's event records go to RUN_DIR/tb,
each (tag, step) once, so running it again, or on a run the daemon already wrote, adds only what
is missing. A sweep (its plan.lock.json) gets every member's curves (the member's RUN_DIR/tb) and
every finished member's HParams session (SWEEP_DIR/tb/<member>, sweep/run/hparams.py). With
--out DIR: a run's curves go to DIR/<run>, a sweep's to DIR/<sweep>/runs/<member run> and its
sessions to DIR/<sweep>/tb/<member>.

Every path is checked before anything is written (65: neither a run nor a sweep dir); 78 without
the tensorboard package; 74 when a dir cannot be written (the line names it).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from tatu.daemon.run.paths import EVENTS, RunDir, SweepDir
from tatu.exitcodes import BAD_CONFIG, BAD_DATA, IO_ERROR, TatuExit


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="RUN_OR_SWEEP",
                        help=f"a run dir (its {EVENTS}) or a sweep dir (its plan.lock.json)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="write under DIR instead of each run's and sweep's own dir")


@dataclass(frozen=True)
class Curves:
    run: RunDir
    log_dir: Path  # where its TensorBoard files go


def _kind(path: Path) -> str:
    if SweepDir(path).lock_file.is_file():
        return "sweep"
    if RunDir(path).events_file.is_file():
        return "run"
    raise TatuExit(BAD_DATA, f"{path}: neither a run dir (no {EVENTS}) nor a sweep dir (no {SweepDir(path).lock_file.name})")


def _write_curves(curves: Curves, warn) -> str:
    from tatu.tensorboard.writer import TensorBoardWriter

    writer = TensorBoardWriter(curves.log_dir, warn)
    writer.catch_up(curves.run.events())
    writer.close()
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(writer.counts.items())) or "nothing new"
    return f"{curves.log_dir}: {counts} (records of {curves.run.events_file})"


def _sweep(path: Path, out: Path | None, warn) -> list[str]:
    from tatu.sweep.run.hparams import SESSIONS, write_sessions
    from tatu.sweep.plan.lock import read_lock

    locked = read_lock(path)
    base = out / path.absolute().name if out else None
    lines = []
    for member in locked.members_of():
        run = RunDir(member.run_dir)
        if run.events_file.is_file():
            log_dir = SweepDir(base).runs / member.run if base else run.tb
            lines.append(_write_curves(Curves(run, log_dir), warn))
    root = base / SESSIONS if base else path / SESSIONS
    written = write_sessions(path, locked, warn, root)
    lines.append(f"{root}: {written} HParams session(s) written (a member's session is written once, when it has a result)")
    return lines


def main(args: argparse.Namespace) -> int:
    from tatu.tensorboard.writer import unavailable

    kinds = [(path, _kind(path)) for path in args.paths]  # every path checked before anything is written
    missing = unavailable()
    if missing:
        raise TatuExit(BAD_CONFIG, f"{missing}: `pip install tensorboard` (or the project's [dev] extra)")
    failures: list[str] = []
    for path, kind in kinds:
        if kind == "sweep":
            lines = _sweep(path, args.out, failures.append)
        else:
            log_dir = args.out / path.absolute().name if args.out else RunDir(path).tb
            lines = [_write_curves(Curves(RunDir(path), log_dir), failures.append)]
        for line in lines:
            print(line)
    if failures:
        raise TatuExit(IO_ERROR, failures[0])
    print(watch_command(args.paths, args.out))
    return 0


def watch_command(paths: list[Path], out: Path | None) -> str:
    """The `tensorboard` command line that shows what was written."""
    if out or len(paths) == 1:
        return f"tensorboard --logdir {out or paths[0]}"
    return "tensorboard --logdir_spec " + ",".join(f"{p.absolute().name}:{p}" for p in paths)

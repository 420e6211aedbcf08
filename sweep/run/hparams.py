"""One TensorBoard HParams session per sweep member, so the HParams dashboard compares them
(`tensorboard --logdir SWEEP_DIR`).

SWEEP_DIR/tb/<member> holds the session:
- hparams: every variable the plan varies (its axes, the tuned variable, every variable a named
  configuration sets, each at the member's effective value from plan.lock.json), config (the named
  configuration), seed, stage, and the verdict (a result, listed among the hparams so the view can
  filter and sort by it: TensorBoard's metrics are numbers only);
- metrics: the scalars of the member's last eval record in its events, under the tags its
  curves have (tatu.tensorboard.tags): drift/value, change/sftHeld/hi, eval/ptFaq/ppl, ...

It is written once, when the member has a result (the coordinator, as it sees the result; or
`tatu tensorboard SWEEP_DIR`), in a temporary dir renamed into place: a dir already there is a
session already written, and a kill never leaves half of one.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from tatu.daemon.run.paths import RunDir
from tatu.sweep.run.backends import UnitState
from tatu.sweep.judge.outcome import TERMINAL
from tatu.sweep.run.members import MemberStatus, member_status
from tatu.sweep.plan.lock import LockedPlan
from tatu.sweep.plan.member import Member
from tatu.sweep.plan.rule import CONFIG
from tatu.tensorboard.tags import Scalar, eval_scalars
from tatu.tensorboard.writer import TensorBoardWriter

SESSIONS = "tb"  # SWEEP_DIR/tb/<member>


def varied(locked: LockedPlan) -> list[str]:
    """The variables the plan varies between members, in the plan's order."""
    plan = locked.plan
    names = list(plan.axes)
    if plan.tune_var:
        names.append(plan.tune_var)
    for sets in plan.configs.values():
        names += list(sets)
    return list(dict.fromkeys(names))


def _typed(values: list) -> list:
    """One TensorBoard type per hparam across the members: numbers when all are, else strings."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values]
    if all(isinstance(v, bool) for v in values):
        return values
    return ["unset" if v is None else str(v) for v in values]


def hparams_by_run(locked: LockedPlan) -> dict[str, dict]:
    """run -> its hparams but the verdict (typed across every member of the lock)."""
    entries = locked.members
    columns = {var: _typed([e.config.get(var) for e in entries]) for var in varied(locked)}
    if locked.plan.configs:
        columns[CONFIG] = [e.member.values.get(CONFIG, "") for e in entries]
    columns["seed"] = [float(e.member.seed) for e in entries]
    columns["stage"] = [e.member.stage for e in entries]
    return {e.member.run: {name: values[i] for name, values in columns.items()} for i, e in enumerate(entries)}


def final_metrics(run_dir: Path) -> list[Scalar]:
    """The scalars of the member's last eval (its first record of that step, as its curves keep)."""
    evals = RunDir(run_dir).events("eval")
    if not evals:
        return []
    last = max(e["step"] for e in evals)
    return eval_scalars(next(e for e in evals if e["step"] == last))


def write_session(root: Path, locked: LockedPlan, status: MemberStatus, warn: Callable[[str], None]) -> bool:
    """root/<member>: the member's session, unless it has no result yet or the dir exists. True: written."""
    member = status.member
    target = Path(root) / member.name
    if status.state not in TERMINAL or target.exists():
        return False
    metrics = final_metrics(member.run_dir)
    hparams = {**hparams_by_run(locked)[member.run], "verdict": status.verdict or status.state}
    temporary = Path(root) / f".{member.name}.tmp-{os.getpid()}"
    shutil.rmtree(temporary, ignore_errors=True)
    writer = TensorBoardWriter(temporary, warn)
    writer.session(hparams, metrics)
    writer.close()
    if not writer.active:
        shutil.rmtree(temporary, ignore_errors=True)
        return False
    try:
        temporary.rename(target)
    except OSError as exc:  # another writer (`tatu tensorboard` beside the coordinator) got there first
        shutil.rmtree(temporary, ignore_errors=True)
        warn(f"TensorBoard: {target} not written: {exc.strerror or exc}")
        return False
    return True


def write_sessions(sweep_dir: Path, locked: LockedPlan, warn: Callable[[str], None], root: Path | None = None) -> int:
    """Every member with a result that has no session yet (its status read from its run dir alone)."""
    root = Path(root or Path(sweep_dir) / SESSIONS)
    written = 0
    for member in locked.members_of():
        written += write_session(root, locked, member_status(member, UnitState("absent")), warn)
    return written


def wanted(member: Member) -> bool:
    """The member's own run variables decide: TATU_TENSORBOARD=off turns its session off too."""
    return member.env.get("TATU_TENSORBOARD", "auto") != "off"

"""A sweep member's status, derived from its run's one view (daemon/run/view.py read_run) and its
backend's unit state alone.

The coordinator holds no state of its own; this is what it (and `tatu sweep status`) reads:

    its run finished or aborted         done / aborted (its verdict)
    its run diverged (exit 11)          diverged (a result, there is no verdict)
                                        (these: what the member achieved, tatu.sweep.judge.outcome)
    the unit/child is running           running
    exited 11 before its files said so  diverged
    exited 65 or 78                     fatal: the sweep stops with the member's reason
    exited after its crash restarts     fatal (the member cannot run)
    anything else                       pending: started (again) when a slot is free; a
                                        stopped or killed member resumes from its state/
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from tatu import exitcodes
from tatu.daemon.run.paths import RunDir
from tatu.daemon.run.view import read_run
from tatu.formats import fmt_duration, fmt_interval, fmt_pct
from tatu.sweep.judge.outcome import TERMINAL, outcome_of
from tatu.sweep.plan.member import Member
from tatu.sweep.run.backends import UnitState


@dataclass(frozen=True)
class MemberStatus:
    member: Member
    state: str  # pending | running | done | aborted | diverged | fatal
    verdict: str | None = None
    code: int | None = None
    detail: str = ""
    alive: bool = False  # its process still runs (a member that wrote its verdict may still be exiting)


def member_status(member: Member, unit: UnitState) -> MemberStatus:
    status = _member_status(member, unit)
    return replace(status, alive=unit.kind == "running")


def _member_status(member: Member, unit: UnitState) -> MemberStatus:
    directory = member.run_dir
    found = outcome_of(read_run(directory))
    if found.state in TERMINAL:
        return MemberStatus(member, found.state, found.verdict, found.code, found.detail)
    if unit.kind == "running":
        return MemberStatus(member, "running", detail=unit.detail)
    if unit.kind == "exited" and unit.code == exitcodes.NONFINITE_LOSS:  # its abort event not read yet (a torn line)
        return MemberStatus(member, "diverged", "diverged", unit.code, "non-finite (exit 11)")
    if unit.kind == "exited" and unit.code in (exitcodes.BAD_DATA, exitcodes.BAD_CONFIG):
        return MemberStatus(member, "fatal", code=unit.code, detail=_last_error(directory))
    if unit.kind == "exited" and unit.code not in (0, None):
        return MemberStatus(member, "fatal", code=unit.code, detail=f"crashed with exit {unit.code} and was not restarted ({unit.detail})")
    return MemberStatus(member, "pending", detail=unit.detail)


def _last_error(directory: Path) -> str:
    log = RunDir(directory).log_file
    if not log.is_file():
        return ""
    errors = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if " error " in line]
    return errors[-1].split(" error ", 1)[1].strip() if errors else ""


def forecast_cell(status: MemberStatus) -> str:
    """A member still on its way (running, or pending after a stop): its last eval's drift forecast at
    its last step, `forecast@40 +6.1% [+3.2%,+9.8%]` ("" before its third eval, and once it has a verdict:
    its end is measured, and a forecast abort's reason, in its detail, carries the interval)."""
    if status.state not in ("running", "pending"):
        return ""
    found = [record.forecast for record in read_run(status.member.run_dir).evals if record.forecast is not None]
    if not found:
        return ""
    forecast = found[-1]
    return f"forecast@{forecast.end} {fmt_pct(forecast.value)} {fmt_interval(forecast.lo, forecast.hi)}"


def summary(statuses: list[MemberStatus], eta_s: float | None, stage: str | None = None) -> str:
    """`7/20 done, 2 running, 1 aborted (forgets), ETA 3h10m` (ASCII: it is the unit's STATUS)."""
    finished = sum(s.state in TERMINAL for s in statuses)
    running = sum(s.state == "running" for s in statuses)
    aborted = sum(s.state == "aborted" for s in statuses)
    diverged = sum(s.state == "diverged" for s in statuses)
    text = f"{finished}/{len(statuses)} done, {running} running"
    if aborted:
        text += f", {aborted} aborted (forgets)"
    if diverged:
        text += f", {diverged} diverged"
    if eta_s is not None and finished < len(statuses):
        text += f", ETA {fmt_duration(eta_s)}"
    return (f"{stage}: " if stage else "") + text


def member_wall_seconds(member: Member) -> float | None:
    times = read_run(member.run_dir).times
    return times[1] - times[0] if times and times[1] != times[0] else None

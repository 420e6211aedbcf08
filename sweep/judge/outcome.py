"""What a sweep member achieved, in the sweep's words: its run's one view (daemon/run/view.py read_run,
which decides the state by exit class) and nothing else, so every reader (the coordinator, `tatu
sweep status`, the report, the verdict) says the same thing from the same files, on any backend and
after a reboot.

    the run finished                    done (its verdict)
    the run aborted (MIX_FORGET_LIMIT)  aborted (its verdict says forgets)
    the run diverged (exit 11)          diverged: any non-finite loss, gradient norm, eval or tensor (no verdict)
    anything else                       no result yet (pending)

tatu.sweep.run.members puts the backend's unit state beside this (running, fatal, pending)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tatu.daemon.run.view import ABORTED, DIVERGED, FINISHED, RunView, read_run

TERMINAL = ("done", "aborted", "diverged")
RESULTS = {FINISHED: "done", ABORTED: "aborted", DIVERGED: "diverged"}  # a run's end -> the member's result


@dataclass(frozen=True)
class Outcome:
    state: str  # done | aborted | diverged | pending (no result in its run dir)
    verdict: str | None = None
    code: int | None = None
    detail: str = ""


def outcome_of(view: RunView) -> Outcome:
    """The member's result as its run's view holds it (pending: none yet)."""
    state = RESULTS.get(view.ended)
    if state is None or state != "diverged" and view.verdict is None:
        # a forget abort logged and its verdict not written yet (the daemon saves in between): no result yet
        return Outcome("pending")
    if state == "diverged":
        return Outcome(state, "diverged", view.code, view.ended_by.reason)
    aborted = view.verdict.numbers.aborted if view.verdict.numbers else None
    return Outcome(state, view.verdict.outcome, view.code, aborted or "")


def outcome(run_dir: Path) -> Outcome:
    """The member's result as its run dir holds it (pending: none yet)."""
    return outcome_of(read_run(run_dir))


def read_json(path: Path) -> dict | None:
    """A JSON file's object, or None when it is missing or unreadable (a sweep's stop file)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None

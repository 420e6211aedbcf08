"""What a sweep member achieved, read from its run dir alone: never asked of a backend, so every
reader (the coordinator, `tatu sweep status`, the report) derives the same thing from the same
files, on any backend and after a reboot.

    its verdict                         done (its verdict), or aborted when the verdict says so
    events: abort "non-finite loss"     diverged (exit 11: a result, there is no verdict)
    neither                             no result yet (pending)

tatu.sweep.run.members puts the backend's unit state beside this (running, fatal, pending)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tatu import exitcodes
from tatu.daemon.run.paths import RunDir

TERMINAL = ("done", "aborted", "diverged")


@dataclass(frozen=True)
class Outcome:
    state: str  # done | aborted | diverged | pending (no result in its run dir)
    verdict: str | None = None
    code: int | None = None
    detail: str = ""


DIVERGED = Outcome("diverged", "diverged", exitcodes.NONFINITE_LOSS, "non-finite loss")


def verdict_outcome(run_dir: Path) -> Outcome | None:
    """done or aborted, from the member's verdict (None before it has one)."""
    verdict = RunDir(run_dir).verdict()
    if verdict is None:
        return None
    aborted = verdict.numbers.aborted if verdict.numbers else None
    return Outcome("aborted" if aborted else "done", verdict.outcome,
                   exitcodes.FORGET_ABORT if aborted else exitcodes.OK, aborted or "")


def diverged(run_dir: Path) -> bool:
    """Its events say the loss went non-finite (the daemon's abort; there is no verdict)."""
    return any(e.get("reason") == "non-finite loss" for e in RunDir(run_dir).events("abort"))


def outcome(run_dir: Path) -> Outcome:
    """The member's result as its run dir holds it (pending: none yet)."""
    found = verdict_outcome(run_dir)
    if found is not None:
        return found
    return DIVERGED if diverged(run_dir) else Outcome("pending")


def read_json(path: Path) -> dict | None:
    """A JSON file's object, or None when it is missing or unreadable (a sweep's stop file)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None

"""What a run's directory says happened, read without its daemon: `tatu status RUN` after the run.

From the files the daemon writes (daemon/run/paths.py): the verdict, the events (config, step,
checkpoint, abort, resumed, ready) and the resume state's presence, and from the kernel whether a
daemon still holds the directory (daemon/run/lock.py). Torch-free, like paths.py.

The states:
  running      a daemon holds the run directory (its socket may not answer yet: loading, saving)
  finished     the verdict is written and the run was not aborted
  aborted      MIX_FORGET_LIMIT (exit 10, final: a restart exits 10 again) or a non-finite loss,
               gradient, weight or eval (exit 11; its last saved state is intact)
  stopped      a resume state and no verdict: a stop (SIGTERM, `systemctl --user stop`, Ctrl-C) or
               a crash; starting it the way it was started resumes it
  not started  a run directory with nothing to resume (stopped before its baseline eval)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tatu import exitcodes
from tatu.daemon.run.lock import holder_pid
from tatu.daemon.run.paths import RunDir
from tatu.daemon.run.records import Verdict

RUNNING, FINISHED, ABORTED, STOPPED, NOT_STARTED = "running", "finished", "aborted", "stopped", "not started"


@dataclass(frozen=True)
class Started:
    """How the run was last started, from its last config event."""

    by: str  # where TATU_RUN came from: "instance" (a unit), "smoke", "env-file", "env", "override", "default"
    config: dict[str, Any]  # RunConfig.to_json() as the run resolved it
    env_file: str | None  # the file its variables came from, when the run knew it (its CIs' record names it)
    ranks: int  # torchrun's world size (1: one process)


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    state: str
    step: int  # the last step trained (0 before the first)
    limit: int | None  # MIX_STEPS_LIMIT
    saved_step: int | None  # the resume state's step (its last save)
    code: int | None  # the exit code the files show the run ended with (None: stopped, running, unknown)
    reason: str | None  # one line: an abort's reason, the verdict's line without what its CIs cover
    verdict: Verdict | None
    holder: int | None  # the pid of the daemon holding the run directory
    started: Started | None

    @property
    def run(self) -> str:
        return self.run_dir.name

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "run_dir": str(self.run_dir), "state": self.state, "step": self.step,
                "limit": self.limit, "saved_step": self.saved_step, "code": self.code, "reason": self.reason,
                "verdict": None if self.verdict is None else self.verdict.to_json(), "pid": self.holder}


def verdict_reason(verdict: Verdict) -> str:
    """The verdict in one line: its VERDICT line without what its CIs cover (said on a line of its own)."""
    if verdict.line is None:
        return f"VERDICT {verdict.outcome}: {verdict.reason}"
    covers = (verdict.ci_covers or {}).get("text")
    return verdict.line.removesuffix(f"; {covers}") if covers else verdict.line


def _started(files: RunDir, events: list[dict]) -> Started | None:
    configs = [e for e in events if e.get("event") == "config"]
    if not configs:
        return None
    last = configs[-1]
    evals = files.eval_records()
    env_file = evals[-1].ci_covers.get("env_file") if evals else None
    return Started(by=(last.get("origins") or {}).get("TATU_RUN", "default"), config=last.get("config") or {},
                   env_file=env_file, ranks=int(last.get("ranks") or 1))


def read_outcome(run_dir: Path) -> RunOutcome:
    """The run's state from its directory (ValueError naming the file when one is malformed)."""
    files = RunDir(Path(run_dir))
    events = files.events()
    verdict = files.verdict()
    started = _started(files, events)
    steps = [e["step"] for e in events if e.get("event") == "step"]
    saves = [e["step"] for e in events if e.get("event") == "checkpoint"]
    limit = (started.config.get("MIX_STEPS_LIMIT") if started else None)
    # the last abort counts unless the run started again after it (a non-finite abort is not final)
    turns = [e for e in events if e.get("event") in ("abort", "resumed", "ready")]
    abort = turns[-1] if turns and turns[-1].get("event") == "abort" else None
    holder = holder_pid(files.path)
    step = max(steps, default=0)
    state, code, reason = NOT_STARTED, None, None
    if holder is not None:
        state = RUNNING
    elif verdict is not None and verdict.numbers is not None and verdict.numbers.aborted:
        state, code, reason = ABORTED, exitcodes.FORGET_ABORT, verdict.numbers.aborted
        step = max(step, verdict.numbers.step)
    elif verdict is not None:
        state, code, reason = FINISHED, exitcodes.OK, verdict_reason(verdict)
        step = max(step, verdict.numbers.step if verdict.numbers else 0)
    elif abort is not None:
        state, code = ABORTED, exitcodes.NONFINITE_LOSS
        reason = f"{abort.get('reason', 'aborted')} at step {abort.get('step', step)}"
    elif files.has_resume():
        state = STOPPED
    return RunOutcome(files.path, state, step, limit, max(saves, default=None), code, reason, verdict, holder, started)


def is_run_dir(path: Path) -> bool:
    """A directory a daemon wrote: its events, its verdict or its resume state."""
    files = RunDir(Path(path))
    return files.path.is_dir() and (files.events_file.is_file() or files.verdict_file.is_file() or files.has_resume())

"""One view of a run: its directory read once into typed records, and its state decided here alone.

`read_run(dir)` parses events.jsonl once (cached by the file's identity: a report that asks again for
an unchanged run opens nothing) into its evals, its aborts (each knowing whether the run started again
after it), its verdict and how it was last started, and decides one state. The daemon's restart,
`tatu status`, the run report, the sweep's coordinator and its judge all ask it; nothing else reads a
run's state from its files. Torch-free, like paths.py.

The state is decided by the exit class of what ended the run (tatu/exitcodes.py), never by a message:
  running      a daemon holds the run directory (its socket may not answer yet: loading, saving)
  finished     the verdict is written and the run was not aborted (exit 0)
  aborted      MIX_FORGET_LIMIT (exit 10; final: a restart exits 10 again)
  diverged     a non-finite loss, gradient norm, eval or tensor (exit 11; its last saved state is intact)
  fatal        the daemon refused its data or configuration, or the disk (exit 65, 78, 74)
  stopped      a resume state and no verdict: a stop (SIGTERM, `systemctl --user stop`, Ctrl-C) or
               a crash; starting it the way it was started resumes it
  not started  a run directory with nothing to resume (stopped before its baseline eval)

Every abort and contract exit the daemon writes carries its exit code (`code`). An abort event of a
run written before that has none: it is a forget abort (10) when the verdict says the run aborted,
else non-finite (11), the only two aborts tatu wrote.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from tatu import exitcodes
from tatu.daemon.run.lock import holder_pid
from tatu.daemon.run.paths import RunDir, event_kind, read_events
from tatu.daemon.run.records import EvalRecord, Verdict


class RunState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"  # by MIX_FORGET_LIMIT
    DIVERGED = "diverged"
    FATAL = "fatal"
    STOPPED = "stopped"
    NOT_STARTED = "not started"


RUNNING, FINISHED, ABORTED, DIVERGED, FATAL, STOPPED, NOT_STARTED = RunState

# The exit class of a run's end: what each contract code says the run became.
END_STATE = {exitcodes.FORGET_ABORT: ABORTED, exitcodes.NONFINITE_LOSS: DIVERGED, exitcodes.BAD_DATA: FATAL,
             exitcodes.BAD_CONFIG: FATAL, exitcodes.IO_ERROR: FATAL}


@dataclass(frozen=True)
class Started:
    """How the run was last started, from its last config event."""

    by: str  # where TATU_RUN came from: "instance" (a unit), "smoke", "env-file", "env", "override", "default"
    config: dict[str, Any]  # RunConfig.to_json() as the run resolved it
    env_file: str | None  # the file its variables came from, when the run knew it (its CIs' record names it)
    ranks: int  # torchrun's world size (1: one process)


@dataclass(frozen=True)
class RunEnd:
    """An abort event, or a contract exit the daemon logged ("exit"): its step, its reason, the exit code
    it ended the run with, and whether the run started again after it (then it ended nothing)."""

    step: int | None
    reason: str
    code: int
    resumed: bool


@dataclass(frozen=True)
class RunView:
    run_dir: Path
    state: RunState
    ended: RunState | None  # the end its files show, a holder or not: finished, aborted, diverged, fatal (None: none)
    step: int  # the last step trained (0 before the first)
    limit: int | None  # MIX_STEPS_LIMIT
    saved_step: int | None  # the resume state's step (its last save)
    code: int | None  # the exit code the files show the run ended with (None: no end)
    reason: str | None  # one line: the end's reason, the verdict's line without what its CIs cover
    verdict: Verdict | None
    holder: int | None  # the pid of the daemon holding the run directory
    started: Started | None
    evals: tuple[EvalRecord, ...] = ()  # one per step, ascending; a step evaluated twice (restart) keeps the later
    ends: tuple[RunEnd, ...] = ()  # every abort and logged exit, in order
    verdict_step: int | None = None  # the step the verdict event was written at
    last_step: int | None = None  # the last step event's
    resumes: int = 0
    times: tuple[float, float] | None = None  # the first and the last event's time

    @property
    def run(self) -> str:
        return self.run_dir.name

    @property
    def ended_by(self) -> RunEnd | None:
        """What ended the run when it aborted or diverged: its last end not followed by a restart, else the
        verdict's abort (at the verdict's step); None otherwise."""
        if self.ended not in (ABORTED, DIVERGED, FATAL):
            return None
        last = next((end for end in reversed(self.ends) if not end.resumed), None)
        if last is not None:
            return last
        numbers = self.verdict.numbers if self.verdict else None
        if numbers and numbers.aborted:
            return RunEnd(numbers.step, str(numbers.aborted), exitcodes.FORGET_ABORT, False)
        return None

    def _end_json(self) -> dict[str, Any]:
        """The end's code and reason; none while a daemon holds the run (its files may still change)."""
        running = self.state == RUNNING
        return {"code": None if running else self.code, "reason": None if running else self.reason}

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "run_dir": str(self.run_dir), "state": str(self.state), "step": self.step,
                "limit": self.limit, "saved_step": self.saved_step, **self._end_json(),
                "verdict": None if self.verdict is None else self.verdict.to_json(), "pid": self.holder}


def verdict_reason(verdict: Verdict) -> str:
    """The verdict in one line: its VERDICT line without what its CIs cover (said on a line of its own)."""
    if verdict.line is None:
        return f"VERDICT {verdict.outcome}: {verdict.reason}"
    covers = (verdict.ci_covers or {}).get("text")
    return verdict.line.removesuffix(f"; {covers}") if covers else verdict.line


@dataclass(frozen=True)
class _Parsed:
    """What events.jsonl and verdict.json hold, parsed once per version of the two files."""

    evals: tuple[EvalRecord, ...]
    ends: tuple[RunEnd, ...]
    verdict: Verdict | None
    verdict_step: int | None
    started: Started | None
    steps: tuple[int, ...]
    saves: tuple[int, ...]
    resumes: int
    times: tuple[float, float] | None


_CACHE: dict[Path, tuple[tuple, _Parsed]] = {}


def _identity(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _eval(event: dict, path: Path, index: int) -> EvalRecord:
    """The eval event as the daemon's record, its step and the numbers every reader needs checked first."""
    where = f"{path}: eval event #{index + 1}"
    if not isinstance(event.get("step"), int):
        raise ValueError(f"{where}: 'step' is missing or not an integer")
    where += f" (step {event['step']})"
    for key in ("sets", "drift"):
        if not isinstance(event.get(key), dict):
            raise ValueError(f"{where}: '{key}' is missing or not an object")
    return _record(EvalRecord.from_json, event, where)


def _record(read, event: dict, where: str):
    try:
        return read(event, where)  # a format version this tatu does not read: its ValueError names `where`
    except (KeyError, TypeError, AttributeError, StopIteration) as exc:
        raise ValueError(f"{where}: malformed ({type(exc).__name__}: {exc})") from None


def _parse(files: RunDir) -> _Parsed:
    path = files.events_file
    events = read_events(path) if path.is_file() else []
    verdict = files.verdict()
    by_step: dict[int, EvalRecord] = {}
    raw_ends: list[tuple[int | None, str, int | None]] = []
    ends_at: list[int] = []  # the index of each end among the turns (abort, exit, resumed, ready)
    turns = 0
    configs, steps, saves, resumes, verdict_event, verdict_step, times = [], [], [], 0, None, None, []
    for index, event in enumerate(events):
        kind = event_kind(event)
        if isinstance(event, dict) and isinstance(event.get("time"), (int, float)):
            times.append(float(event["time"]))
        if kind == "eval":
            record = _eval(event, path, index)
            by_step[record.step] = record  # after a restart the later eval of a step wins
        elif kind in ("abort", "exit"):
            step = event.get("step")
            code = event.get("code")
            raw_ends.append((step if isinstance(step, int) else None, str(event.get("reason") or "no reason logged"),
                             code if isinstance(code, int) else None))
            turns += 1
            ends_at.append(turns)
        elif kind in ("resumed", "ready"):
            turns += 1
            resumes += kind == "resumed"
        elif kind == "verdict":
            verdict_event = _record(Verdict.from_json, event, f"{path}: verdict event #{index + 1}")
            verdict_step = event.get("step")
        elif kind == "config":
            configs.append(event)
        elif kind == "step" and isinstance(event.get("step"), int):
            steps.append(event["step"])
        elif kind == "checkpoint" and isinstance(event.get("step"), int):
            saves.append(event["step"])
    verdict = verdict if verdict is not None else verdict_event  # the file is written first; the event, its copy
    aborted_by_limit = bool(verdict and verdict.numbers and verdict.numbers.aborted)
    # an end without a code was written before ends carried one: a forget abort has a verdict that says so
    legacy = exitcodes.FORGET_ABORT if aborted_by_limit else exitcodes.NONFINITE_LOSS
    ends = tuple(RunEnd(step, reason, legacy if code is None else code, at < turns)
                 for (step, reason, code), at in zip(raw_ends, ends_at))
    evals = tuple(by_step[s] for s in sorted(by_step))
    started = None
    if configs:
        last = configs[-1]
        env_file = evals[-1].ci_covers.get("env_file") if evals else None
        started = Started(by=(last.get("origins") or {}).get("TATU_RUN", "default"), config=last.get("config") or {},
                          env_file=env_file, ranks=int(last.get("ranks") or 1))
    return _Parsed(evals, ends, verdict, verdict_step, started, tuple(steps), tuple(saves), resumes,
                   (times[0], times[-1]) if times else None)


def _parsed(files: RunDir) -> _Parsed:
    key = (_identity(files.events_file), _identity(files.verdict_file))
    cached = _CACHE.get(files.path)
    if cached is not None and cached[0] == key and key[0] is not None:
        return cached[1]
    parsed = _parse(files)
    _CACHE[files.path] = (key, parsed)
    return parsed


def read_run(run_dir: Path) -> RunView:
    """The run as its directory tells it (ValueError naming the file and the event when one is malformed).
    events.jsonl is parsed again only when it changed since the last call."""
    files = RunDir(Path(run_dir).absolute())
    parsed = _parsed(files)
    verdict, started = parsed.verdict, parsed.started
    limit = started.config.get("MIX_STEPS_LIMIT") if started else None
    holder = holder_pid(files.path)
    step = max(parsed.steps, default=0)
    final = next((end for end in reversed(parsed.ends) if not end.resumed), None)
    ended, code, reason = None, None, None
    if verdict is not None and verdict.numbers is not None and verdict.numbers.aborted:
        ended, code, reason = ABORTED, exitcodes.FORGET_ABORT, verdict.numbers.aborted
        step = max(step, verdict.numbers.step)
    elif verdict is not None:
        ended, code, reason = FINISHED, exitcodes.OK, verdict_reason(verdict)
        step = max(step, verdict.numbers.step if verdict.numbers else 0)
    elif final is not None and final.code in END_STATE:
        ended, code = END_STATE[final.code], final.code
        reason = f"{final.reason} at step {final.step if final.step is not None else step}"
    # a daemon in it: running, whatever its files say (a member exiting after its verdict: `ended` says so)
    state = RUNNING if holder is not None else ended or (STOPPED if files.has_resume() else NOT_STARTED)
    return RunView(Path(run_dir), state, ended, step, limit, max(parsed.saves, default=None), code, reason, verdict, holder,
                   started, parsed.evals, parsed.ends, parsed.verdict_step, parsed.steps[-1] if parsed.steps else None,
                   parsed.resumes, parsed.times)


def is_run_dir(path: Path) -> bool:
    """A directory a daemon wrote: its events, its verdict or its resume state."""
    files = RunDir(Path(path))
    return files.path.is_dir() and (files.events_file.is_file() or files.verdict_file.is_file() or files.has_resume())

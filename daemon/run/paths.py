"""A run dir's files, named here and nowhere else: the daemon writes them, and the sweep, the
report, `tatu tensorboard` and `tatu doctor` read them through `RunDir`. A sweep's directory,
sweeps/<name>/, is laid out here too (`SweepDir`): its members' run dirs are under its runs/, and
the coordinator, the judge, the sweep report and the run report find its files through it.

Torch-free on purpose: the sweep's coordinator and common step read run dirs without loading
the training code (daemon/actions.py imports torch and the checkpoint writers)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tatu.daemon.run.records import EvalRecord, Verdict

RUN_LOG = "run.log"
EVENTS = "events.jsonl"
VERDICT = "verdict.json"
STATE = "state"
BEST = "best"
FINAL = "final"
EVALS = "evals"
TB = "tb"
REPORT = "report"
FISHER = "fisher.safetensors"
# A sweep's directory (SweepDir)
RUNS = "runs"
SCORES = "scores"
LOOKS = "looks.jsonl"
PLAN_LOCK = "plan.lock.json"
ENV = "env"
# The checkpoint writer's swap leaves the previous copy as NAME.old for a moment (model/checkpoint/directory.py).
OLD_SUFFIX = ".old"

Event = dict[str, Any]


def read_events(path: Path) -> list[Event]:
    """An events file as a list; a torn last line (a kill mid-write) is ignored."""
    events = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def event_kind(record: Any) -> str | None:
    """An event's kind ("eval", "step", ...); None for a line that is not an event object."""
    return record.get("event") if isinstance(record, dict) else None


@dataclass(frozen=True)
class RunDir:
    """One run's directory, TATU_OUT/TATU_RUN. The daemon holds a flock on the directory itself
    (daemon/run/lock.py), so there is no lock file."""

    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @property
    def log_file(self) -> Path:
        return self.path / RUN_LOG

    @property
    def events_file(self) -> Path:
        return self.path / EVENTS

    @property
    def verdict_file(self) -> Path:
        return self.path / VERDICT

    @property
    def state(self) -> Path:
        """The resume state (tatu.daemon.resume)."""
        return self.path / STATE

    @property
    def best(self) -> Path:
        return self.path / BEST

    @property
    def final(self) -> Path:
        return self.path / FINAL

    @property
    def evals_dir(self) -> Path:
        return self.path / EVALS

    @property
    def tb(self) -> Path:
        """TensorBoard's files under TATU_TENSORBOARD=auto (and `tatu tensorboard`'s default)."""
        return self.path / TB

    @property
    def report(self) -> Path:
        """`tatu report RUN_DIR`'s page when it is given one run and no --out."""
        return self.path / REPORT

    @property
    def fisher_file(self) -> Path:
        """The seed's Fisher, computed once (daemon/retention/fisher.py)."""
        return self.path / FISHER

    @property
    def env_file(self) -> Path:
        """The run's variables beside its run dir, TATU_OUT/<run>.env (the demo writes it)."""
        return self.path.parent / f"{self.path.name}.env"

    def eval_lines(self, step: int) -> Path:
        """Where TATU_EVAL_LINES=1 keeps the per-line scores of the eval at `step`."""
        return self.evals_dir / f"step-{step:06d}.json"

    def has_resume(self) -> bool:
        """A resume state is there (or its `.old` copy mid-swap): what only a daemon that ran here leaves."""
        return self.state.is_dir() or self.path.joinpath(STATE + OLD_SUFFIX).is_dir()

    def events(self, kind: str | None = None) -> list[Event]:
        """The run's events in order, only those of `kind` when given; none before the run wrote any."""
        if not self.events_file.is_file():
            return []
        events = read_events(self.events_file)
        return events if kind is None else [e for e in events if event_kind(e) == kind]

    def eval_records(self) -> list[EvalRecord]:
        """The run's eval events as records, in order (a step evaluated again after a restart appears
        twice: its numbers are the same); a malformed one is refused, naming the file and the event."""
        records = []
        for index, event in enumerate(self.events("eval")):
            where = f"{self.events_file}: eval event #{index + 1}"
            try:
                records.append(EvalRecord.from_json(event, where))
            except (KeyError, TypeError, AttributeError) as exc:
                raise ValueError(f"{where}: malformed ({type(exc).__name__}: {exc})") from None
        return records

    def verdict(self) -> Verdict | None:
        """The run's verdict file as a record; None before the run wrote one."""
        if not self.verdict_file.is_file():
            return None
        payload = json.loads(self.verdict_file.read_text(encoding="utf-8"))
        try:
            return Verdict.from_json(payload, str(self.verdict_file))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{self.verdict_file}: malformed ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class SweepDir:
    """One sweep's directory, sweeps/<name>/ (`tatu sweep start` makes it): its plan's lock, its
    members' run dirs (runs/<run>, their TATU_OUT), their env files, the looks log of a sequential
    design, the scoring cache and `tatu sweep report`'s page and report.json."""

    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def of_member(cls, run_dir: Path) -> "SweepDir | None":
        """The sweep whose runs/ holds `run_dir` (resolved: a link to a member is its member), beside the
        sweep's lock; None for a run dir that is no sweep's member."""
        runs = Path(run_dir).resolve().parent
        sweep = cls(runs.parent)
        return sweep if runs.name == RUNS and sweep.lock_file.is_file() else None

    @property
    def lock_file(self) -> Path:
        """The locked plan (sweep/plan/lock.py), written before any member starts."""
        return self.path / PLAN_LOCK

    @property
    def runs(self) -> Path:
        """The members' TATU_OUT: each member's run dir is runs/<run>."""
        return self.path / RUNS

    @property
    def env_dir(self) -> Path:
        """The env files a foreground or Ray coordinator started its members from."""
        return self.path / ENV

    def env_file(self, run: str) -> Path:
        return self.env_dir / f"{run}.env"

    @property
    def looks_file(self) -> Path:
        """A sequential design's looks log (sweep/judge/looks_log.py)."""
        return self.path / LOOKS

    @property
    def scores(self) -> Path:
        """The scoring cache: one file per checkpoint and eval sets scored (sweep/judge/scores.py)."""
        return self.path / SCORES

    @property
    def report(self) -> Path:
        """`tatu sweep report`'s page, plots and report.json (without --out)."""
        return self.path / REPORT

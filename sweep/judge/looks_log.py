"""The looks log, sweeps/<name>/looks.jsonl: every look of a sequential sweep, one JSON line each,
appended and fsynced before anything new is scheduled from it, so a coordinator killed at any
moment finds every decision it acted on (a torn last line, from a kill mid-write, is the one thing
dropped: it was never acted on). Each line is a LoggedLook: the configuration, the criterion, the
members and their steps it was decided on, and the look itself (evals/seeds/sequential.Look: the
statistic, the boundary, the decision). `tatu sweep report` recomputes every look from the run dirs
and check_agrees refuses (65) a log that says otherwise: a decision nobody can reproduce is not one
to act on.

A design that pools the seed variance (min_seeds = 2) also logs, per look, the other configurations'
members it pooled (`pooled`, one PooledGroup each): which of them had finished depends on when the
look was made, so the files alone could not say it afterwards; the log says it, and the report
recomputes with exactly those members (each still finished, at the same step). An unpooled look's
line has no such key (the same bytes as before pooling existed)."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from tatu.daemon.run.paths import LOOKS, SweepDir
from tatu.evals.seeds.sequential import Look
from tatu.exitcodes import BAD_DATA
from tatu.sweep.errors import SweepError

VERSION = 1
FILE = LOOKS  # the log's name, as SweepDir lays it out
TOLERANCE = 1e-9  # recomputed numbers are the same arithmetic on the same files: only float printing differs


@dataclass(frozen=True)
class PooledGroup:
    """One other configuration's members whose seed variance a look pooled: its first ones in seed order."""

    config: str
    members: tuple[str, ...]
    steps: tuple[int, ...]   # each member's last step then

    def to_json(self) -> dict:
        return {"config": self.config, "members": list(self.members), "steps": list(self.steps)}

    @classmethod
    def from_json(cls, doc: dict) -> "PooledGroup":
        return cls(doc["config"], tuple(doc["members"]), tuple(int(s) for s in doc["steps"]))


@dataclass(frozen=True)
class LoggedLook:
    """One look at one criterion of one configuration, as logged."""

    config: str               # the configuration's key (replay-n6)
    criterion: str            # the rule's condition, as written (drift_hi < MIX_FORGET_LIMIT)
    members: tuple[str, ...]  # the members it was decided on, in seed order
    steps: tuple[int, ...]    # each member's last step then
    look: Look
    pooled: tuple[PooledGroup, ...] | None = None  # None: the look's own seeds alone (min_seeds >= 3)

    def to_json(self) -> dict:
        doc = {"version": VERSION, "config": self.config, "criterion": self.criterion,
               "members": list(self.members), "steps": list(self.steps), "look": self.look.to_json()}
        if self.pooled is not None:
            doc["pooled"] = [group.to_json() for group in self.pooled]
        return doc

    @property
    def pooled_configs(self) -> int:
        """How many configurations the look's seed variance came from (its own among them)."""
        return 1 + len(self.pooled or ())

    @classmethod
    def from_json(cls, doc: dict) -> "LoggedLook":
        if doc.get("version") != VERSION:
            raise ValueError(f"looks log version {doc.get('version')!r}, this tatu reads {VERSION}")
        pooled = doc.get("pooled")
        return cls(doc["config"], doc["criterion"], tuple(doc["members"]), tuple(int(s) for s in doc["steps"]),
                   Look.from_json(doc["look"]),
                   None if pooled is None else tuple(PooledGroup.from_json(g) for g in pooled))


def append(sweep_dir: Path, entry: LoggedLook) -> None:
    """One line, written whole and fsynced before the caller schedules anything from it. A torn
    last line (a kill mid-write: never acted on, read() drops it) is cut off first, or the new line
    would be glued to it."""
    path = SweepDir(sweep_dir).looks_file
    line = (json.dumps(entry.to_json(), sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        _cut_torn_tail(fd)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _cut_torn_tail(fd: int) -> None:
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    text = os.pread(fd, size, 0)
    os.ftruncate(fd, text.rfind(b"\n") + 1)


def read(sweep_dir: Path) -> list[LoggedLook]:
    """Every complete line; a last line without its newline (a kill mid-write) is dropped, anything
    else unreadable is 65 naming the file and the line."""
    path = SweepDir(sweep_dir).looks_file
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    complete = lines[:-1]  # the part after the last newline is empty, or a torn write
    out = []
    for number, line in enumerate(complete, 1):
        try:
            out.append(_by_folder(Path(sweep_dir).absolute().name, LoggedLook.from_json(json.loads(line))))
        except (ValueError, KeyError, TypeError) as exc:
            raise SweepError(BAD_DATA, f"{path}:{number}: not a look ({exc})")
    return out


def _by_folder(sweep: str, entry: LoggedLook) -> LoggedLook:
    """A look with every member named by its run's folder (SWEEP.MEMBER under runs/, the sweep's
    own name being its directory's). A log written before members were named so holds MEMBER alone:
    the same member, which the recomputation from the files names by its folder."""
    def named(members: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(m if m.startswith(sweep + ".") else f"{sweep}.{m}" for m in members)

    pooled = None if entry.pooled is None else tuple(
        PooledGroup(g.config, named(g.members), g.steps) for g in entry.pooled)
    return LoggedLook(entry.config, entry.criterion, named(entry.members), entry.steps, entry.look, pooled)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isinf(a) and a == b) or abs(a - b) <= TOLERANCE * max(1.0, abs(a), abs(b))
    return a == b


def look_key(entry: LoggedLook) -> tuple[str, str, int]:
    """What identifies a look: its configuration, its criterion and its number of seeds."""
    return entry.config, entry.criterion, entry.look.n_seeds


def _shown(entry: LoggedLook, key: str):
    """A field as the refusal names it: a pooled group as its members at their steps (a-s1@4)."""
    if key == "pooled":
        return None if entry.pooled is None else [f"{m}@{step}" for g in entry.pooled for m, step in zip(g.members, g.steps)]
    return getattr(entry.look, key, getattr(entry, key, None))


def _compare(path: Path, number: int, got: LoggedLook, want: LoggedLook) -> None:
    keys = [k for k in ("config", "criterion", "members", "steps", "pooled") if getattr(got, k) != getattr(want, k)]
    keys += [k for k in Look.__dataclass_fields__ if not _same(getattr(got.look, k), getattr(want.look, k))]
    if keys:
        shown = ", ".join(f"{k} {_shown(got, k)!r} (recomputed {_shown(want, k)!r})" for k in keys[:3])
        raise SweepError(BAD_DATA, f"{path}:{number}: {got.config} {got.criterion} at {got.look.n_seeds} seeds "
                                   f"disagrees with the run dirs: {shown}")


def check_agrees(path: Path, logged: list[LoggedLook], recomputed: list[LoggedLook]) -> None:
    """65 naming the first look where the log and the recomputation from the files differ."""
    if len(logged) != len(recomputed):
        raise SweepError(BAD_DATA, f"{path}: {len(logged)} looks logged, {len(recomputed)} recomputed from the run dirs")
    for number, (got, want) in enumerate(zip(logged, recomputed), 1):
        _compare(path, number, got, want)


def check_logged(path: Path, logged: list[LoggedLook], recomputed: list[LoggedLook]) -> None:
    """Every look of the whole log (`logged`, read(): line n is logged[n - 1]) that `recomputed` also
    holds must agree with it: 65 naming the file's line of the first that does not."""
    by_key = {look_key(entry): entry for entry in recomputed}
    for number, entry in enumerate(logged, 1):
        want = by_key.get(look_key(entry))
        if want is not None:
            _compare(path, number, entry, want)

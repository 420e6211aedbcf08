"""One TensorBoard log dir: event files as TensorBoard's own writer lays them out (tensorboard's
RecordWriter), holding the summaries torch.utils.tensorboard builds (its `summary` functions).

- Each (tag, step) is written once: a point whose step is not past the last one the dir already
  holds for its tag (read from its event files when the writer opens) is skipped. A run that
  restarts from its resume state redoes the steps after it; their first copy stays, as in
  events.jsonl's first record of that step (on CPU the two copies are bit-identical: exact resume).
- Scalars are float64 tensors (new-style, double precision): a reader gets events.jsonl's number
  to the last bit, where a classic float32 `simple_value` would round it.
- Written in the caller's thread and flushed after every record (SummaryWriter's background
  thread would print its own traceback on a full disk): a kill loses at most the record being
  written, and a later writer catches up from events.jsonl (`catch_up`).
- A failure of its own (the package missing, the dir unwritable, the disk full) is one warning
  naming the path, then the writer stops writing. It never raises: TensorBoard is a view of a run,
  and must never cost the run a step.
"""
from __future__ import annotations

import itertools
import os
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from tatu.storage import free_bytes, is_storage_error, mb
from tatu.tensorboard.tags import Scalar, Text, scalars, texts

EVENT_FILES = "events.out.tfevents.*"
TEXT_SUFFIX = "/text_summary"  # torch's text summary stores a text under tag + this (the text plugin's naming)
_FILE_NUMBERS = itertools.count()  # two writers of one process never share a file name


def unavailable() -> str | None:
    """Why TensorBoard cannot be written from this process (None: it can)."""
    try:
        from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: F401 -- the imports are the check
        from torch.utils.tensorboard import summary  # noqa: F401
    except ImportError as exc:
        return f"the tensorboard package does not import ({exc})"
    return None


def last_steps(log_dir: Path) -> dict[str, int]:
    """tag -> the last step the dir's event files hold for it (a torn last record is ignored)."""
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    last: dict[str, int] = {}
    for path in sorted(Path(log_dir).glob(EVENT_FILES)):
        for event in LegacyEventFileLoader(str(path)).Load():
            for value in event.summary.value:
                last[value.tag] = max(event.step, last.get(value.tag, event.step))
    return last


def _reason(exc: BaseException, path: Path) -> str:
    if is_storage_error(exc):
        return f"{exc.strerror} ({mb(free_bytes(path))} free there)"
    return f"{type(exc).__name__}: {exc}"


class _EventFile:
    """One new event file: its version record first, then summaries, each flushed by the caller."""

    def __init__(self, log_dir: Path):
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event = Event
        log_dir.mkdir(parents=True, exist_ok=True)
        # TensorBoard reads a dir's event files in the order of their names: the number of files already
        # there comes first, so a restart's file sorts after the killed run's even within one second
        # (a timestamp and a pid do not: the restart may be the smaller pid).
        order = len(list(log_dir.glob(EVENT_FILES)))
        name = (f"events.out.tfevents.{order:06d}.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
                f".{next(_FILE_NUMBERS)}")
        self._records = RecordWriter(open(log_dir / name, "ab"))
        self._records.write(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())

    def add(self, summary, step: int, walltime: float | None) -> None:
        event = self._event(wall_time=time.time() if walltime is None else walltime, step=step, summary=summary)
        self._records.write(event.SerializeToString())

    def flush(self) -> None:
        self._records.flush()

    def close(self) -> None:
        self._records.close()


class TensorBoardWriter:
    """Write events.jsonl records (and HParams sessions) into `log_dir`; `warn(line)` hears a failure once.

    Its event file is made at the first point the dir lacks: a writer with nothing new to write
    leaves the dir as it was."""

    def __init__(self, log_dir: Path, warn: Callable[[str], None]):
        self.log_dir = Path(log_dir)
        self.warn = warn
        self.failure: str | None = None
        self.written: dict[str, int] = {}  # tag -> last step in the dir
        self.counts: Counter = Counter()  # records that brought something new, by kind ("session": sessions)
        self._events: _EventFile | None = None  # made at the first point the dir lacks
        missing = unavailable()
        if missing:
            self._fail(missing)
            return
        try:
            self.written = last_steps(self.log_dir) if self.log_dir.is_dir() else {}
        except Exception as exc:  # noqa: BLE001 -- whatever it is, the run must go on without it
            self._fail(_reason(exc, self.log_dir))

    @property
    def active(self) -> bool:
        """Not failed: it writes what it is given."""
        return self.failure is None

    def _fail(self, reason: str) -> None:
        """Say it once, then write nothing more (a writer that failed once may fail half-way again)."""
        events, self._events = self._events, None
        if self.failure is None:
            self.failure = reason
            self.warn(f"TensorBoard: cannot write {self.log_dir}: {reason}; nothing more is written there "
                      f"(the run goes on; `tatu tensorboard` writes it later from events.jsonl)")
        if events is not None:
            try:
                events.close()
            except Exception:  # noqa: BLE001 -- the failure is already reported
                pass

    def _file(self) -> _EventFile:
        if self._events is None:
            self._events = _EventFile(self.log_dir)
        return self._events

    def _new(self, tag: str, step: int) -> bool:
        if step <= self.written.get(tag, -1):
            return False
        self.written[tag] = step
        return True

    def write(self, record: dict) -> None:
        """A record's scalars and texts, those not in the dir yet; flushed."""
        if not self.active:
            return
        walltime = record.get("time")
        try:
            wrote = self._scalars(scalars(record), walltime) + self._texts(texts(record), walltime)
            if wrote:
                self.counts[record.get("event")] += 1
                self._events.flush()
        except Exception as exc:  # noqa: BLE001 -- see the module's docstring
            self._fail(_reason(exc, self.log_dir))

    def _scalars(self, points: list[Scalar], walltime: float | None) -> int:
        from torch.utils.tensorboard import summary

        fresh = [p for p in points if self._new(p.tag, p.step)]
        for p in fresh:
            self._file().add(summary.scalar(p.tag, p.value, new_style=True, double_precision=True), p.step, walltime)
        return len(fresh)

    def _texts(self, items: list[Text], walltime: float | None) -> int:
        from torch.utils.tensorboard import summary

        fresh = [t for t in items if self._new(t.tag + TEXT_SUFFIX, t.step)]
        for t in fresh:
            self._file().add(summary.text(t.tag, t.text), t.step, walltime)
        return len(fresh)

    def catch_up(self, records: list[dict]) -> None:
        """Every record in order: what the dir lacks of them is written (the rest is skipped)."""
        for record in records:
            self.write(record)

    def session(self, hparams: dict, metrics: list[Scalar], walltime: float | None = None) -> None:
        """An HParams session: the hparams' start and end records (no experiment record: TensorBoard
        builds the experiment from every session it finds, so members added later join it), and the
        metrics as scalars of this dir."""
        if not self.active:
            return
        from torch.utils.tensorboard.summary import hparams as hparams_records

        try:
            _experiment, start, end = hparams_records(hparams, {m.tag: m.value for m in metrics})
            step = max((m.step for m in metrics), default=0)
            self._file().add(start, step, walltime)
            self._scalars(metrics, walltime)
            self._file().add(end, step, walltime)
            self.counts["session"] += 1
            self._events.flush()
        except Exception as exc:  # noqa: BLE001 -- see the module's docstring
            self._fail(_reason(exc, self.log_dir))

    def close(self) -> None:
        events, self._events = self._events, None
        if events is None:
            return
        try:
            events.close()
        except Exception as exc:  # noqa: BLE001 -- see the module's docstring
            self._fail(_reason(exc, self.log_dir))

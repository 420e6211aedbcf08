"""Where the run speaks: the console (or journald), the run's log and the events file (their names:
daemon/run/paths.py, RunDir).

- Under journald (JOURNAL_STREAM set) each stdout line carries its syslog priority prefix
  (<3> error, <4> warning, <6> info); journald strips it, so `journalctl -o cat` shows the
  contract lines (EVAL ...) exactly as written.
- Elsewhere (a terminal, a pipe): info lines as they are, others prefixed with their level.
- Always: the run's log (plain lines) and the events file (one JSON object per event, every number
  of the run) in the run directory. Until the run directory is attached (every input checked)
  they are held in memory: a start refused for bad input leaves no run directory behind.
- A write the disk refuses (full, read-only) is a StorageError naming the file and the free
  space (exit 74), and that file is written no further.
- Sinks (`add_sink`: TensorBoard) get every event record after the events file has it, the same
  dict: what they show is the events file's numbers.
"""
from __future__ import annotations

import io
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import structlog

# read_events is the run dir's reader; kept importable from here, where tests and benches look for it
from tatu.daemon.run.paths import RunDir, read_events  # noqa: F401
from tatu.storage import is_storage_error, storage_error

_PRIORITY = {"error": 3, "critical": 2, "warning": 4, "info": 6, "debug": 7}


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    return value


def connected_to_journal(stream) -> bool:
    """True when `stream` is journald's stream socket: JOURNAL_STREAM names its device:inode.

    The variable alone is not enough: a child process or `tatu run | tee` inherits it while
    writing somewhere else, where "<6>" prefixes would be noise."""
    value = os.environ.get("JOURNAL_STREAM", "")
    dev, _, ino = value.partition(":")
    try:
        st = os.fstat(stream.fileno())
        return bool(value) and st.st_dev == int(dev) and st.st_ino == int(ino)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


def priority_prefix(level: str, stream) -> str:
    """The syslog priority prefix journald reads ("<3>" error ...), or "" off the journal."""
    return f"<{_PRIORITY.get(level, 6)}>" if connected_to_journal(stream) else ""


class _Sink:
    """The end of a structlog pipeline: hands what the processors rendered to `write`, whatever
    the level (the processors already put it into the text)."""

    def __init__(self, write):
        self.write = write

    def info(self, **rendered):
        return self.write(**rendered)

    debug = warning = error = critical = msg = info


class RunLog:
    """Two structlog pipelines: lines (level, timestamp -> the console line with its journald
    priority prefix, and the run's log's line) and events (time, JSON -> the events file)."""

    def __init__(self, run_dir: Path | None, stream=None):
        self.stream = stream or sys.stdout
        self.journal = connected_to_journal(self.stream)
        self.run_dir = run_dir
        self._log_file = self._events_file = None
        self._pending_log: list[str] = []  # written to the run's log / the events file once attached
        self._pending_events: list[str] = []
        self._sinks: list = []  # objects with write(record) and close(); neither may raise
        if run_dir is not None:
            self.attach(run_dir)
        self._lines = structlog.wrap_logger(_Sink(self._write_line), processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%Y-%m-%dT%H:%M:%S", utc=False, key="stamp"),
            self._render_line,
        ])
        self._events = structlog.wrap_logger(_Sink(self._write_event), processors=[_event_record, _event_json])

    def attach(self, run_dir: Path) -> None:
        """Start writing the run's log and the events file (called once the run dir may exist)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = run_dir
        files = RunDir(run_dir)
        self._log_file = open(files.log_file, "a", encoding="utf-8", buffering=1)
        self._events_file = open(files.events_file, "a", encoding="utf-8", buffering=1)
        pending_log, pending_events = self._pending_log, self._pending_events
        self._pending_log, self._pending_events = [], []
        for line in pending_log:
            self._append("_log_file", line)
        for line in pending_events:
            self._append("_events_file", line)

    def _append(self, which: str, line: str) -> None:
        handle = getattr(self, which)
        if handle is None:
            (self._pending_log if which == "_log_file" else self._pending_events).append(line)
            return
        try:
            handle.write(line)
        except OSError as exc:
            if not is_storage_error(exc):
                raise
            setattr(self, which, None)  # what follows (the error line itself) goes to the console only
            try:
                handle.close()
            except OSError:
                pass
            raise storage_error(handle.name, exc, "log") from None

    def _render_line(self, _logger, _method_name: str, event_dict: dict) -> dict:
        """The last line processor: per line of the message, the console's and the run's log's text."""
        level, stamp = event_dict.pop("level"), event_dict.pop("stamp")
        message = event_dict.pop("event", "")
        extras = " ".join(f"{k}={v}" for k, v in event_dict.items())
        lines = f"{message}{' ' + extras if extras else ''}".splitlines() or [""]
        if self.journal:
            console = [f"<{_PRIORITY.get(level, 6)}>{line}\n" for line in lines]
        else:
            console = [f"{line}\n" if level == "info" else f"{level.upper()}: {line}\n" for line in lines]
        return {"console": console, "file": [f"{stamp} {level:<7} {line}\n" for line in lines]}

    def _write_line(self, console: list[str], file: list[str]) -> None:
        for shown, kept in zip(console, file):
            self.stream.write(shown)
            if self.run_dir is None or self._log_file is not None:
                self._append("_log_file", kept)
        self.stream.flush()

    def _write_event(self, line: str, record: dict) -> dict:
        if self.run_dir is None or self._events_file is not None:
            self._append("_events_file", line)
        for sink in self._sinks:
            sink.write(record)
        return record

    def add_sink(self, sink) -> None:
        """Hand every event record from now on to `sink.write(record)` too; `close` closes it."""
        self._sinks.append(sink)

    def info(self, message: str, **fields) -> None:
        self._lines.info(message, **fields)

    def warning(self, message: str, **fields) -> None:
        self._lines.warning(message, **fields)

    def error(self, message: str, **fields) -> None:
        self._lines.error(message, **fields)

    def event(self, kind: str, **data) -> dict:
        """Append one event to the events file (the report's only source of numbers)."""
        return self._events.info(kind, **data)

    def close(self) -> None:
        for sink in self._sinks:
            sink.close()
        for f in (self._log_file, self._events_file):
            if f is not None:
                try:
                    f.close()
                except OSError:  # the disk filled under the last buffered line: already reported
                    pass


def _event_record(_logger, _method_name: str, event_dict: dict) -> dict:
    """{"event": kind, "time": unix seconds (ms), then the data, JSON-safe}."""
    kind = event_dict.pop("event")
    return {"event": kind, "time": round(time.time(), 3), **_jsonable(event_dict)}


def _event_json(_logger, _method_name: str, record: dict) -> dict:
    return {"line": json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n", "record": record}

"""SIGTERM and SIGINT: a graceful stop at the next step boundary, asked for from the first instant.

Installed before anything heavy is imported (torch takes seconds to load): a signal that
arrives while the process is still loading is remembered, not fatal. SIGINT (Ctrl-C on a
foreground `tatu run`) means what SIGTERM means; a second SIGINT forces the exit
(KeyboardInterrupt, which daemon/main.py turns into exit 130 without a traceback). This
module imports nothing heavy on purpose.
"""
from __future__ import annotations

import signal
import threading
from typing import Callable

_stop = threading.Event()
_interrupts = 0
_on_stop: list[Callable[[], None]] = []
_previous: dict[int, object] = {}


def install() -> None:
    """From here on SIGTERM and SIGINT ask for a graceful stop (idempotent)."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (a daemon run embedded in a thread keeps its host's)
    for signum in (signal.SIGTERM, signal.SIGINT):
        if signum not in _previous:
            _previous[signum] = signal.signal(signum, _handle)


def uninstall() -> None:
    """Back to the handlers found at `install` (a test or `tatu run` in-process goes on afterwards)."""
    global _interrupts
    for signum, handler in _previous.items():
        signal.signal(signum, handler)
    _previous.clear()
    _on_stop.clear()
    _stop.clear()
    _interrupts = 0


def on_stop(callback: Callable[[], None]) -> None:
    """Call `callback` (in the signal handler) when a stop is asked; at once if it already was."""
    _on_stop.append(callback)
    if _stop.is_set():
        callback()


def stop_requested() -> bool:
    return _stop.is_set()


def _handle(signum, _frame) -> None:
    global _interrupts
    if signum == signal.SIGINT:
        _interrupts += 1
        if _interrupts > 1:
            raise KeyboardInterrupt  # the operator insists: no more waiting for a step boundary
    if _stop.is_set():
        return
    _stop.set()
    for callback in _on_stop:
        callback()

"""sd_notify for the daemon: READY, STATUS, a progress-gated watchdog, timeout extensions.

Everything is a no-op without NOTIFY_SOCKET (a terminal run, a test). Each field goes in
its own datagram: `sdnotify` encodes latin-1 and silently drops a datagram that fails to
encode, so a combined "STATUS=...\\nWATCHDOG=1" with one bad character would also lose the
watchdog ping. STATUS text is folded to ASCII before it is sent.
"""
from __future__ import annotations

import os
import unicodedata

import sdnotify

# Characters NFKD leaves alone but that have an obvious ASCII reading; without this map
# "−1.2%" (U+2212, what some formatters emit) would lose its sign.
_ASCII_LOOKALIKES = str.maketrans({
    "\u2212": "-", "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-",
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2026": "...",
    "\u00d7": "x", "\u00b7": ".", "\u00b1": "+-", "\u00a0": " ", "\u202f": " ",
})


def to_ascii(text: str) -> str:
    """Fold `text` to printable ASCII on one line: "ç" -> "c", "−" -> "-", others dropped."""
    folded = unicodedata.normalize("NFKD", text.translate(_ASCII_LOOKALIKES))
    ascii_only = folded.encode("ascii", "ignore").decode("ascii")
    # A newline would start a new KEY=VALUE field in the datagram.
    return " ".join(ascii_only.split())


class Notifier:
    """Talks to the service manager through NOTIFY_SOCKET; silent when there is none.

    `feed_watchdog()` sends WATCHDOG=1: call it only after a step finished, so
    a hung loop stops feeding the watchdog and systemd restarts it.
    """

    def __init__(self, environ: dict[str, str] | None = None):
        env = os.environ if environ is None else environ
        self.socket_address = env.get("NOTIFY_SOCKET") or None
        self._watchdog_usec = _own_watchdog_usec(env)
        self._notifier = None
        if self.socket_address is not None:
            # sdnotify reads NOTIFY_SOCKET itself; debug=True makes it raise so that
            # _send can report a lost datagram instead of dropping it unseen.
            try:
                self._notifier = sdnotify.SystemdNotifier(debug=True)
            except OSError:
                self._notifier = None
        self.failed_sends = 0

    @property
    def enabled(self) -> bool:
        return self._notifier is not None

    def _send(self, field: str) -> bool:
        if self._notifier is None:
            return False
        try:
            self._notifier.notify(field)
        except (OSError, UnicodeError):
            self.failed_sends += 1
            return False
        return True

    def ready(self) -> bool:
        return self._send("READY=1")

    def status(self, text: str) -> bool:
        return self._send("STATUS=" + to_ascii(text))

    def feed_watchdog(self) -> bool:
        """WATCHDOG=1: the loop made progress (a step finished)."""
        return self._send("WATCHDOG=1")

    def extend_timeout(self, seconds: float) -> bool:
        """Push the start/stop timeout out by `seconds` from now (model load, baseline eval, final save)."""
        return self._send(f"EXTEND_TIMEOUT_USEC={_usec(seconds)}")

    def set_watchdog_timeout(self, seconds: float) -> bool:
        """Change the watchdog timeout (and restart its clock), e.g. around a long eval.

        A no-op when the unit has no watchdog: sending WATCHDOG_USEC would arm one."""
        if self._watchdog_usec is None:
            return False
        return self._send(f"WATCHDOG_USEC={_usec(seconds)}")

    def restore_watchdog_timeout(self) -> bool:
        """Back to the unit's WatchdogSec= after `set_watchdog_timeout`."""
        if self._watchdog_usec is None:
            return False
        return self._send(f"WATCHDOG_USEC={self._watchdog_usec}")

    def stopping(self) -> bool:
        return self._send("STOPPING=1")

    def watchdog_usec(self) -> int | None:
        """The unit's watchdog timeout in microseconds, None when no watchdog applies to us."""
        return self._watchdog_usec


def _usec(seconds: float) -> int:
    if not seconds > 0:
        raise ValueError(f"timeout seconds must be > 0, got {seconds!r}")
    return int(seconds * 1_000_000)


def _own_watchdog_usec(env) -> int | None:
    raw = env.get("WATCHDOG_USEC")
    if not raw:
        return None
    # systemd sets WATCHDOG_PID too; a child that inherited the variables must not act on them.
    owner = env.get("WATCHDOG_PID")
    if owner and owner.isdigit() and int(owner) != os.getpid():
        return None
    try:
        usec = int(raw)
    except ValueError:
        return None
    return usec if usec > 0 else None


def watchdog_usec() -> int | None:
    """WATCHDOG_USEC of this process's environment (None if unset or meant for another PID)."""
    return _own_watchdog_usec(os.environ)

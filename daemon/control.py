"""The control socket server: the protocol of control_protocol.py, served at the path and
with the access rules of control_access.py.

One thread runs a selector loop over all connections, so a flood of clients costs one
thread and bounded memory, and never blocks the training loop. Handlers run in that
thread: the daemon keeps them cheap (read a snapshot, or set a flag the loop acts on at
the next step boundary). That thread still shares the interpreter lock with the loop, so what
clients may make it do is bounded too (control_protocol.py's limits): MAX_CONNECTIONS clients
at once, and per connection a token bucket; a connection over its rate gets one error reply
and is not read again until a token is back, so a flooding client waits in its own send or
recv instead of spinning the server. Used as a context manager: `with ControlServer(path, handlers):`.
"""
from __future__ import annotations

import errno
import json
import math
import os
import selectors
import socket
import threading
import time
from pathlib import Path

from tatu.daemon.control_access import (  # noqa: F401  (socket_path, peer_allowed: the module's API)
    bind_private, ensure_private_dir, peer_allowed, peer_credentials, refuse_if_live, socket_path,
)
from tatu.daemon.control_protocol import (  # noqa: F401  (PROTOCOL_VERSION: the module's API)
    MAX_CONNECTIONS, MAX_REQUEST_BYTES, MAX_REQUEST_DEPTH, PROTOCOL_VERSION, RATE_BURST, RATE_PER_S, Handler,
    dispatch, error_reply, rate_limited_reply, too_many_clients_reply,
)

# A client that sends nothing for this long is dropped, freeing its slot.
IDLE_TIMEOUT_S = 60.0
# Closing a Unix socket with unread input makes the peer's recv fail with ECONNRESET
# before it reads our last (error) reply; so a closing connection first shuts down its
# write side and discards input for up to this long (or this many bytes), then closes.
LINGER_S = 2.0
LINGER_MAX_BYTES = 1024 * 1024
# A client that stops reading replies cannot make the daemon buffer without bound.
MAX_PENDING_REPLY_BYTES = 8 * 1024 * 1024
# Paused connections resume on a grid of this step, so many paused clients wake the server
# thread together, a few times a second, rather than each on its own.
RESUME_TICK_S = 0.05
_UNIX_PATH_MAX = 107


class TokenBucket:
    """`burst` requests at once, then `rate` a second, on a clock the caller passes (tests pass
    their own)."""
    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate: float, burst: int, now: float):
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = float(burst), now

    def take(self, now: float) -> float:
        """Spend a token: 0.0 if there was one, else the seconds until there is one (none spent)."""
        self.tokens = min(float(self.burst), self.tokens + max(now - self.stamp, 0.0) * self.rate)
        self.stamp = max(now, self.stamp)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class _Connection:
    __slots__ = ("sock", "inbox", "outbox", "closing", "last_active", "linger_until", "discarded", "bucket",
                 "paused_until", "served", "events")

    def __init__(self, sock: socket.socket, served: bool):
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.closing = False  # close once the outbox is flushed
        self.last_active = time.monotonic()
        self.linger_until: float | None = None  # set once the final reply is flushed
        self.discarded = 0
        self.bucket = TokenBucket(RATE_PER_S, RATE_BURST, self.last_active)
        self.paused_until: float | None = None  # over its rate: not read until then
        self.served = served  # counts against MAX_CONNECTIONS (a refused one only lingers)
        self.events = 0  # what the selector watches for it (0: not registered)


class ControlServer:
    """Serves `handlers` (cmd -> fn(request) -> dict of reply fields) at `path`."""

    def __init__(self, path: Path, handlers: dict[str, Handler]):
        self.path = Path(path)
        self.handlers = dict(handlers)
        self._own_uid = os.getuid()
        self._listener: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wakeup_r, self._wakeup_w = -1, -1
        self._connections: dict[int, _Connection] = {}
        self._served = 0  # connections counted against MAX_CONNECTIONS
        self._accepting = False  # the listener is watched (not while refused ones fill their quota)
        self.requests_handled = 0
        self.refused_peers = 0
        self.refused_clients = 0  # over MAX_CONNECTIONS
        self.rate_limited = 0  # requests answered with rate_limited_reply

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> "ControlServer":
        if len(os.fsencode(self.path)) > _UNIX_PATH_MAX:
            raise RuntimeError(f"control socket path {self.path} is longer than {_UNIX_PATH_MAX} bytes")
        ensure_private_dir(self.path.parent)
        refuse_if_live(self.path)
        self._listener = bind_private(self.path)
        self._listener.setblocking(False)
        self._wakeup_r, self._wakeup_w = os.pipe()
        os.set_blocking(self._wakeup_r, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wakeup_r, selectors.EVENT_READ, "wakeup")
        self._accept_again()
        self._thread = threading.Thread(target=self._serve, name="tatu-control", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._wakeup_w >= 0:
            try:
                os.write(self._wakeup_w, b"x")
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        for conn in list(self._connections.values()):
            self._drop(conn)
        if self._selector is not None:
            self._selector.close()
        if self._listener is not None:
            self._listener.close()
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        for fd in (self._wakeup_r, self._wakeup_w):
            if fd >= 0:
                os.close(fd)
        self._wakeup_r = self._wakeup_w = -1
        self._listener = self._selector = self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the loop ------------------------------------------------------------------
    def _serve(self) -> None:
        selector = self._selector
        while not self._stop.is_set():
            for key, events in selector.select(timeout=self._select_timeout()):
                if key.data == "wakeup":
                    continue
                if key.data is None:
                    self._accept()
                    continue
                conn: _Connection = key.data
                try:
                    if events & selectors.EVENT_READ:
                        self._read(conn)
                    if events & selectors.EVENT_WRITE:
                        self._flush(conn)
                except Exception:  # one bad connection must never end the server thread
                    self._drop(conn)
            self._resume_due()
            self._drop_idle()

    def _select_timeout(self) -> float:
        """Sleep until the next paused connection may be read again (at most 1 s: idle checks)."""
        due = min((c.paused_until for c in self._connections.values() if c.paused_until is not None), default=None)
        return 1.0 if due is None else min(1.0, max(due - time.monotonic(), 0.0))

    def _resume_due(self) -> None:
        now = time.monotonic()
        for conn in list(self._connections.values()):
            if conn.paused_until is not None and conn.paused_until <= now and not conn.closing:
                conn.paused_until = None
                try:
                    self._process(conn)  # the lines it sent before the pause first
                    self._flush(conn)
                except Exception:  # as in _serve: one bad connection never ends the thread
                    self._drop(conn)

    def _accept(self) -> None:
        while True:
            # Refused clients linger (as every closing connection does) so they read their
            # refusal; past this many open connections the rest wait in the listen backlog.
            if len(self._connections) >= 2 * MAX_CONNECTIONS:
                self._selector.unregister(self._listener)
                self._accepting = False
                return
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return  # out of descriptors: try again on the next event
                raise
            try:
                _, peer_uid, _ = peer_credentials(sock)
            except OSError:
                sock.close()
                continue
            sock.setblocking(False)
            allowed = peer_allowed(peer_uid, self._own_uid)
            conn = _Connection(sock, served=allowed and self._served < MAX_CONNECTIONS)
            self._connections[sock.fileno()] = conn
            if conn.served:
                self._served += 1
                self._watch(conn)
                continue
            if not allowed:
                self.refused_peers += 1
                self._queue(conn, error_reply(f"permission denied: peer uid {peer_uid} is not the daemon's uid {self._own_uid}"))
            else:
                self.refused_clients += 1
                self._queue(conn, too_many_clients_reply())
            conn.closing = True
            self._flush(conn)

    def _accept_again(self) -> None:
        if not self._accepting and self._listener is not None:
            self._selector.register(self._listener, selectors.EVENT_READ, None)
            self._accepting = True

    def _watch(self, conn: _Connection) -> None:
        """Have the selector watch `conn` for what it needs now: input unless paused, output
        while replies wait; nothing at all while a paused connection has nothing to send."""
        events = (0 if conn.paused_until is not None else selectors.EVENT_READ) | \
            (selectors.EVENT_WRITE if conn.outbox else 0)
        if events == conn.events:
            return
        if not events:
            self._selector.unregister(conn.sock)
        elif not conn.events:
            self._selector.register(conn.sock, events, conn)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if not data:
            self._drop(conn)
            return
        if conn.closing:
            conn.discarded += len(data)
            if conn.discarded > LINGER_MAX_BYTES:
                self._drop(conn)
            return
        conn.last_active = time.monotonic()
        conn.inbox += data
        self._process(conn)
        self._flush(conn)

    def _process(self, conn: _Connection) -> None:
        """Answer the complete lines in `conn`'s inbox while its bucket has tokens. The first
        line over the rate is answered `rate limited` and the connection pauses: what it sent
        after waits in the inbox (at most one read of it) or in the kernel's socket buffer,
        where the client's own send blocks."""
        now = time.monotonic()
        while not conn.closing and conn.paused_until is None:
            newline = conn.inbox.find(b"\n")
            if newline < 0:
                if len(conn.inbox) > MAX_REQUEST_BYTES:
                    self._queue(conn, error_reply(f"request line longer than {MAX_REQUEST_BYTES} bytes; closing"))
                    conn.inbox.clear()
                    conn.closing = True
                break
            wait = conn.bucket.take(now)
            if wait:
                del conn.inbox[: newline + 1]
                conn.paused_until = math.ceil((now + wait) / RESUME_TICK_S) * RESUME_TICK_S
                self.rate_limited += 1
                self._queue(conn, rate_limited_reply(round(conn.paused_until - now, 3)))
                break
            line = bytes(conn.inbox[:newline])
            del conn.inbox[: newline + 1]
            if len(line) > MAX_REQUEST_BYTES:
                self._queue(conn, error_reply(f"request line longer than {MAX_REQUEST_BYTES} bytes; closing"))
                conn.closing = True
                break
            self._queue(conn, self.dispatch(line))

    def dispatch(self, line: bytes) -> dict:
        """One request line -> one reply object. Never raises."""
        self.requests_handled += 1
        return dispatch(self.handlers, line)

    def _queue(self, conn: _Connection, reply: dict) -> None:
        try:
            encoded = json.dumps(reply, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            encoded = json.dumps(error_reply(f"reply is not JSON-serializable: {exc}")).encode("utf-8")
        conn.outbox += encoded + b"\n"
        if len(conn.outbox) > MAX_PENDING_REPLY_BYTES:
            self._drop(conn)

    def _flush(self, conn: _Connection) -> None:
        if conn.sock.fileno() < 0:
            return
        while conn.outbox:
            try:
                sent = conn.sock.send(conn.outbox)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._drop(conn)
                return
            del conn.outbox[:sent]
        if not conn.outbox and conn.closing and conn.linger_until is None:
            conn.paused_until = None  # a closing connection is read (and discarded) until it lingers out
            conn.linger_until = time.monotonic() + LINGER_S
            try:
                conn.sock.shutdown(socket.SHUT_WR)  # the client sees EOF after our reply
            except OSError:
                self._drop(conn)
                return
        self._watch(conn)

    def _drop(self, conn: _Connection) -> None:
        conn.closing = True
        fd = conn.sock.fileno()
        if fd < 0:
            return
        if self._connections.pop(fd, None) is not None and conn.served:
            self._served -= 1
        if conn.events:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.events = 0
        conn.sock.close()
        if not self._stop.is_set() and self._selector is not None:
            self._accept_again()  # a slot is free again (a no-op unless accepting had stopped)

    def _drop_idle(self) -> None:
        now = time.monotonic()
        for conn in list(self._connections.values()):
            if conn.last_active < now - IDLE_TIMEOUT_S or (conn.linger_until is not None and conn.linger_until < now):
                self._drop(conn)

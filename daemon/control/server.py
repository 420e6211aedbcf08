"""The control socket server: the protocol of protocol.py, served at the path and
with the access rules of access.py.

One thread runs a selector loop over all connections, so a flood of clients costs one
thread and bounded memory, and never blocks the training loop. Handlers run in that
thread: the daemon keeps them cheap (read a snapshot, or set a flag the loop acts on at
the next step boundary). That thread shares the interpreter lock with the loop, so what clients
may make it do is bounded (protocol.py's limits): MAX_CONNECTIONS clients at once, and a
connection over its rate (its own, or its peer uid's across all that uid's connections: reconnecting
gains nothing) gets one error reply and is not read again until a token is back (a flooding client
waits in its own send or recv). Use: `with ControlServer(path, handlers):`.
"""
from __future__ import annotations

import errno
import os
import selectors
import socket
import threading
import time
from pathlib import Path

from tatu.daemon.control.access import (  # noqa: F401  (socket_path, peer_allowed: the module's API)
    bind_private, claim, ensure_private_dir, peer_allowed, peer_credentials, refuse_if_live, socket_path,
)
from tatu.daemon.control.connection import (
    IDLE_TIMEOUT_S, LINGER_MAX_BYTES, LINGER_S, MAX_PENDING_REPLY_BYTES, Connection, UidBuckets, on_resume_grid,
)
from tatu.daemon.control.listener import Listener
from tatu.daemon.control.protocol import (  # noqa: F401  (PROTOCOL_VERSION: the module's API)
    MAX_CONNECTIONS, MAX_REQUEST_BYTES, MAX_REQUEST_DEPTH, PROTOCOL_VERSION, Handler, dispatch, error_reply,
    encode_reply, rate_limited_reply, too_many_clients_reply,
)

_UNIX_PATH_MAX = 107


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
        self._claim = -1  # the flock that makes the path ours (access.claim)
        self._connections: dict[int, Connection] = {}
        self._served = 0  # connections counted against MAX_CONNECTIONS
        self._accepts: Listener | None = None  # the listener as the selector watches it
        self.requests_handled = 0
        self.refused_peers = 0
        self.refused_clients = 0  # over MAX_CONNECTIONS
        self.rate_limited = 0  # requests answered with rate_limited_reply
        self._uid_buckets = UidBuckets()  # peer uid -> the bucket all its connections share

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> "ControlServer":
        if len(os.fsencode(self.path)) > _UNIX_PATH_MAX:
            raise RuntimeError(f"control socket path {self.path} is longer than {_UNIX_PATH_MAX} bytes")
        ensure_private_dir(self.path.parent)
        self._claim = claim(self.path)  # SocketTaken: another daemon's, or being bound by one now
        try:
            refuse_if_live(self.path)  # a daemon that does not claim (an older tatu) is not robbed either
            self._listener = bind_private(self.path)
        except BaseException:
            self._release_claim()
            raise
        self._listener.setblocking(False)
        self._wakeup_r, self._wakeup_w = os.pipe()
        os.set_blocking(self._wakeup_r, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wakeup_r, selectors.EVENT_READ, "wakeup")
        self._accepts = Listener(self._listener, self._selector)
        self._accepts.resume()
        self._thread = threading.Thread(target=self._serve, name="tatu-control", daemon=True)
        self._thread.start()
        return self

    def _release_claim(self) -> None:
        if self._claim >= 0:
            os.close(self._claim)
            self._claim = -1

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
        self._release_claim()  # after the unlink: the next daemon's socket is never removed by this one
        self._listener = self._selector = self._thread = self._accepts = None

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
                conn: Connection = key.data
                try:
                    if events & selectors.EVENT_READ:
                        self._read(conn)
                    if events & selectors.EVENT_WRITE:
                        self._flush(conn)
                except Exception:  # one bad connection must never end the server thread
                    self._drop(conn)
            self._resume_due()
            self._drop_idle()

    def _select_timeout(self) -> float:  # until the next paused connection (or held accept) is due (1 s at most)
        due = min((t for t in (*(c.paused_until for c in self._connections.values()), self._accepts.held_until) if t is not None),
                  default=None)
        return 1.0 if due is None else min(1.0, max(due - time.monotonic(), 0.0))

    def _resume_due(self) -> None:
        now = time.monotonic()
        if self._accepts.held_until is not None and self._accepts.held_until <= now:
            self._accepts.resume()
        for conn in [c for c in self._connections.values() if c.paused_until is not None and c.paused_until <= now]:
            conn.paused_until = None  # always cleared: a due pause left set would make select() spin
            try:
                if not conn.closing:
                    self._process(conn)  # the lines it sent before the pause first
                self._flush(conn)
            except Exception:  # as in _serve: one bad connection never ends the thread
                self._drop(conn)

    def _accept(self) -> None:
        while True:
            # Refused clients linger (as every closing connection does) so they read their
            # refusal; past this many open connections the rest wait in the listen backlog.
            if len(self._connections) >= 2 * MAX_CONNECTIONS:
                self._accepts.stop()
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
            conn = Connection(sock, served=allowed and self._served < MAX_CONNECTIONS,
                              uid_bucket=self._uid_buckets[peer_uid] if allowed else None)
            self._connections[sock.fileno()] = conn
            now = time.monotonic()
            wait = conn.admit(now)
            if conn.served and not wait:
                self._served += 1
                conn.watch(self._selector)
            else:  # one line, then closed (after a linger, so that the client reads it)
                conn.served = False
                self._queue(conn, self._refusal(allowed, peer_uid, on_resume_grid(now + wait) - now if wait else 0.0))
                conn.closing = True
                self._flush(conn)
            if wait:  # and nobody else is accepted until then: the next ones wait in the listen backlog
                self._accepts.stop(until=on_resume_grid(now + wait))
                return

    def _refusal(self, allowed: bool, peer_uid: int, wait: float) -> dict:
        if wait:  # its uid is over its rate (a client that reconnects for each request)
            self.rate_limited += 1
            return rate_limited_reply(round(wait, 3))
        self.refused_peers, self.refused_clients = self.refused_peers + (not allowed), self.refused_clients + allowed
        return too_many_clients_reply() if allowed else error_reply(
            f"permission denied: peer uid {peer_uid} is not the daemon's uid {self._own_uid}")

    def _read(self, conn: Connection) -> None:
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

    def _process(self, conn: Connection) -> None:
        """Answer `conn`'s complete lines while its bucket has tokens; the first over the rate gets
        `rate limited` and pauses it: the rest wait in its inbox (one read at most) or the kernel's buffer."""
        now = time.monotonic()
        while not conn.closing and conn.paused_until is None:
            newline = conn.inbox.find(b"\n")
            if newline < 0:
                if len(conn.inbox) > MAX_REQUEST_BYTES:
                    self._queue(conn, error_reply(f"request line longer than {MAX_REQUEST_BYTES} bytes; closing"))
                    conn.inbox.clear()
                    conn.closing = True
                break
            wait = conn.take(now)
            if wait:
                del conn.inbox[: newline + 1]
                self.rate_limited += 1
                self._queue(conn, rate_limited_reply(conn.pause(now, wait)))
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

    def _queue(self, conn: Connection, reply: dict) -> None:
        conn.outbox += encode_reply(reply)
        if len(conn.outbox) > MAX_PENDING_REPLY_BYTES:
            self._drop(conn)

    def _flush(self, conn: Connection) -> None:
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
        conn.watch(self._selector)

    def _drop(self, conn: Connection) -> None:
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
            self._accepts.resume()  # a slot is free again

    def _drop_idle(self) -> None:
        now = time.monotonic()
        for conn in list(self._connections.values()):
            if conn.last_active < now - IDLE_TIMEOUT_S or (conn.linger_until is not None and conn.linger_until < now):
                self._drop(conn)

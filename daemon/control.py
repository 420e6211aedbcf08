"""The control socket server: the protocol of control_protocol.py, served at the path and
with the access rules of control_access.py.

One thread runs a selector loop over all connections, so a flood of clients costs one
thread and bounded memory, and never blocks the training loop. Handlers run in that
thread: the daemon keeps them cheap (read a snapshot, or set a flag the loop acts on at
the next step boundary). Used as a context manager: `with ControlServer(path, handlers):`.
"""
from __future__ import annotations

import errno
import json
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
    MAX_CONNECTIONS, MAX_REQUEST_BYTES, MAX_REQUEST_DEPTH, PROTOCOL_VERSION, Handler, dispatch, error_reply,
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
_UNIX_PATH_MAX = 107


class _Connection:
    __slots__ = ("sock", "inbox", "outbox", "closing", "last_active", "linger_until", "discarded")

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.closing = False  # close once the outbox is flushed
        self.last_active = time.monotonic()
        self.linger_until: float | None = None  # set once the final reply is flushed
        self.discarded = 0


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
        self.requests_handled = 0
        self.refused_peers = 0

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
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wakeup_r, selectors.EVENT_READ, "wakeup")
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
            for key, events in selector.select(timeout=1.0):
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
            self._drop_idle()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return  # out of descriptors: try again on the next event
                raise
            if len(self._connections) >= MAX_CONNECTIONS:
                sock.close()
                continue
            try:
                _, peer_uid, _ = peer_credentials(sock)
            except OSError:
                sock.close()
                continue
            sock.setblocking(False)
            conn = _Connection(sock)
            self._connections[sock.fileno()] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)
            if not peer_allowed(peer_uid, self._own_uid):
                self.refused_peers += 1
                self._queue(conn, error_reply(f"permission denied: peer uid {peer_uid} is not the daemon's uid {self._own_uid}"))
                conn.closing = True
                self._flush(conn)

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
        while not conn.closing:
            newline = conn.inbox.find(b"\n")
            if newline < 0:
                if len(conn.inbox) > MAX_REQUEST_BYTES:
                    self._queue(conn, error_reply(f"request line longer than {MAX_REQUEST_BYTES} bytes; closing"))
                    conn.inbox.clear()
                    conn.closing = True
                break
            line = bytes(conn.inbox[:newline])
            del conn.inbox[: newline + 1]
            if len(line) > MAX_REQUEST_BYTES:
                self._queue(conn, error_reply(f"request line longer than {MAX_REQUEST_BYTES} bytes; closing"))
                conn.closing = True
                break
            self._queue(conn, self.dispatch(line))
        self._flush(conn)

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
        if conn.outbox:
            self._selector.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
        elif conn.closing:
            if conn.linger_until is None:
                conn.linger_until = time.monotonic() + LINGER_S
                try:
                    conn.sock.shutdown(socket.SHUT_WR)  # the client sees EOF after our reply
                except OSError:
                    self._drop(conn)
                    return
            self._selector.modify(conn.sock, selectors.EVENT_READ, conn)
        else:
            self._selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _drop(self, conn: _Connection) -> None:
        conn.closing = True
        fd = conn.sock.fileno()
        if fd < 0:
            return
        self._connections.pop(fd, None)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _drop_idle(self) -> None:
        now = time.monotonic()
        for conn in list(self._connections.values()):
            if conn.last_active < now - IDLE_TIMEOUT_S or (conn.linger_until is not None and conn.linger_until < now):
                self._drop(conn)

"""The control socket server (design contract): newline-delimited JSON over a Unix stream socket.

One request per line, one reply per line:
    {"v":1,"cmd":"status"}  ->  {"v":1,"ok":true, ...handler's fields}
    anything wrong          ->  {"v":1,"ok":false,"error":"..."}
A request is at most MAX_REQUEST_BYTES long and MAX_REQUEST_DEPTH deep (checked before it is
parsed: json.loads recurses once per level); whatever goes wrong while handling one, the
client gets an error reply.
One thread runs a selector loop over all connections, so a flood of clients costs one
thread and bounded memory, and never blocks the training loop. Handlers run in that
thread: the daemon keeps them cheap (read a snapshot, or set a flag the loop acts on at
the next step boundary).

Who may connect: the daemon's own uid, and root (root can read the process's memory
anyway, refusing it protects nothing). Checked per connection with SO_PEERCRED.
"""
from __future__ import annotations

import errno
import json
import os
import selectors
import socket
import stat
import struct
import threading
import time
from pathlib import Path
from typing import Callable

PROTOCOL_VERSION = 1
MAX_REQUEST_BYTES = 64 * 1024
# Every command is a flat object; a little nesting is allowed for arguments to come.
MAX_REQUEST_DEPTH = 16
# Beyond this many open connections new ones are closed at once: same-uid clients are
# trusted, but a runaway script must not exhaust the daemon's file descriptors.
MAX_CONNECTIONS = 64
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
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid

Handler = Callable[[dict], dict]


def socket_path(run: str, environ: dict[str, str] | None = None) -> Path:
    """Where run `run`'s daemon listens; the client computes the same path.

    The units set RuntimeDirectory=tatu, so under systemd $RUNTIME_DIRECTORY is
    $XDG_RUNTIME_DIR/tatu, the same directory a client in the user's session finds.
    """
    if not run or "/" in run or run.startswith("."):
        raise ValueError(f"run name {run!r} must be a plain name (no '/', not starting with '.')")
    env = os.environ if environ is None else environ
    if env.get("RUNTIME_DIRECTORY"):
        # systemd joins several RuntimeDirectory= entries with ':'; ours is the first.
        return Path(env["RUNTIME_DIRECTORY"].split(":")[0]) / f"{run}.sock"
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "tatu" / f"{run}.sock"
    return Path(f"/tmp/tatu-{os.getuid()}") / f"{run}.sock"


def peer_allowed(peer_uid: int, own_uid: int) -> bool:
    """Same uid only, plus root."""
    return peer_uid == own_uid or peer_uid == 0


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return _UCRED.unpack(raw)


def ensure_private_dir(directory: Path) -> None:
    """Create `directory` 0700, or check that an existing one is ours and not open to others."""
    try:
        directory.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise RuntimeError(f"control socket directory {directory} is not a directory (a symlink?)")
    if info.st_uid != os.getuid():
        raise RuntimeError(f"control socket directory {directory} belongs to uid {info.st_uid}, not {os.getuid()}")
    if info.st_mode & 0o077:
        os.chmod(directory, 0o700)


def nesting_depth(line: bytes) -> int:
    """The deepest nesting of [ and { in a JSON text, outside strings (no parsing, no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in line:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def error_reply(message: str) -> dict:
    return {"v": PROTOCOL_VERSION, "ok": False, "error": message}


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
        self._refuse_if_live(self.path)
        self._listener = self._bind_private(self.path)
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

    @staticmethod
    def _refuse_if_live(path: Path) -> None:
        """A socket left by a killed daemon is replaced; one with a listener is not stolen."""
        if not path.exists() and not path.is_symlink():
            return
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return  # stale: nobody listening
        finally:
            probe.close()
        raise RuntimeError(f"another daemon is already listening at {path}")

    @staticmethod
    def _bind_private(path: Path) -> socket.socket:
        # Bind under a temporary name, chmod, then rename into place: the final path never
        # exists with looser permissions, and no process-wide umask change races other threads.
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            temporary.unlink()
        except FileNotFoundError:
            pass
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(temporary))
            os.chmod(temporary, 0o600)
            os.replace(temporary, path)
            listener.listen(MAX_CONNECTIONS)
        except BaseException:
            listener.close()
            try:
                temporary.unlink()
            except FileNotFoundError:
                pass
            raise
        return listener

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
        try:
            return self._dispatch(line)
        except Exception as exc:  # whatever the request did, the protocol promises a reply
            return error_reply(f"request could not be handled: {type(exc).__name__}: {exc}"[:500])

    def _dispatch(self, line: bytes) -> dict:
        depth = nesting_depth(line)
        if depth > MAX_REQUEST_DEPTH:
            return error_reply(f"request nested {depth} levels deep; at most {MAX_REQUEST_DEPTH} are accepted")
        try:
            request = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            return error_reply("request is not valid UTF-8")
        except ValueError as exc:
            return error_reply(f"request is not valid JSON: {exc}")
        if not isinstance(request, dict):
            return error_reply(f"request must be a JSON object, got {type(request).__name__}")
        version = request.get("v")
        if version != PROTOCOL_VERSION or isinstance(version, bool):
            return error_reply(f"unsupported protocol version v={version!r}; this daemon speaks v={PROTOCOL_VERSION}")
        cmd = request.get("cmd")
        if not isinstance(cmd, str):
            return error_reply(f"missing or non-string 'cmd'; known commands: {', '.join(sorted(self.handlers))}")
        handler = self.handlers.get(cmd)
        if handler is None:
            return error_reply(f"unknown cmd {cmd!r}; known commands: {', '.join(sorted(self.handlers))}")
        try:
            result = handler(request)
        except Exception as exc:  # a handler bug must not take the server (or the run) down
            return error_reply(f"{cmd} failed: {type(exc).__name__}: {exc}")
        if not isinstance(result, dict):
            return error_reply(f"{cmd} handler returned {type(result).__name__}, not an object")
        return {**result, "v": PROTOCOL_VERSION, "ok": True}

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

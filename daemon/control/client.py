"""The client side of the control socket (daemon/control/protocol.py): one request, one reply.

What `tatu status`, the sweep's backends and the tests use to talk to a running daemon.
"""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from tatu.daemon.control.access import socket_path
from tatu.daemon.control.protocol import MAX_REQUEST_BYTES, PROTOCOL_VERSION

# Replies (the evals history) can be much longer than requests.
_MAX_REPLY_BYTES = 64 * 1024 * 1024


class ControlError(RuntimeError):
    """The daemon could not be reached, or it answered ok=false."""


def request(path: Path | str, cmd: str, timeout: float = 5.0, **args) -> dict:
    """Send one command to the daemon at `path`; return its reply (ok=true) or raise ControlError.

    A `rate limited` reply (the request was not handled: its uid's other clients spent the tokens)
    is retried after the `retry_after_s` it names, for as long as `timeout` allows."""
    path = Path(path)
    line = json.dumps({"v": PROTOCOL_VERSION, "cmd": cmd, **args}).encode("utf-8") + b"\n"
    if len(line) > MAX_REQUEST_BYTES:
        raise ControlError(f"tatu: request {cmd!r} is {len(line)} bytes, over the {MAX_REQUEST_BYTES}-byte limit")
    deadline = time.monotonic() + timeout
    while True:
        decoded = _send(path, cmd, line, timeout)
        wait = decoded.get("retry_after_s") if decoded.get("error") == "rate limited" else None
        if not isinstance(wait, (int, float)) or time.monotonic() + wait >= deadline:
            break
        time.sleep(wait)
    if decoded.get("ok") is not True:
        raise ControlError(f"tatu: the daemon refused {cmd!r}: {decoded.get('error')}")
    return decoded


def _send(path: Path, cmd: str, line: bytes, timeout: float) -> dict:
    """One connection, one request line, its reply decoded (a dict; a reply that is not one is an error)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise ControlError(f"tatu: no daemon listening at {path} (is the run started?)") from None
        except PermissionError:
            raise ControlError(f"tatu: permission denied connecting to {path} (the daemon runs as another user?)") from None
        try:
            sock.sendall(line)
            reply = _read_line(sock)
        except socket.timeout:
            raise ControlError(f"tatu: no reply from {path} within {timeout:g}s") from None
        except OSError as exc:
            raise ControlError(f"tatu: connection to {path} failed: {exc}") from None
    finally:
        sock.close()
    if not reply:
        raise ControlError(f"tatu: the daemon at {path} closed the connection without a reply")
    try:
        decoded = json.loads(reply)
    except ValueError as exc:
        raise ControlError(f"tatu: unreadable reply from {path}: {exc}") from None
    if not isinstance(decoded, dict):
        raise ControlError(f"tatu: the daemon refused {cmd!r}: {decoded}")
    return decoded


def _read_line(sock: socket.socket) -> bytes:
    received = bytearray()
    while b"\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
        if len(received) > _MAX_REPLY_BYTES:
            raise ControlError(f"tatu: reply longer than {_MAX_REPLY_BYTES} bytes")
    return bytes(received.split(b"\n", 1)[0])


def resolve_socket(run: str | None, socket_override: str | None = None) -> Path:
    """The socket for `run`; with no run, the only socket in the runtime directory."""
    if socket_override:
        return Path(socket_override)
    if run:
        return socket_path(run)
    directory = socket_path("any").parent
    candidates = sorted(directory.glob("*.sock")) if directory.is_dir() else []
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise ControlError(f"tatu: no run sockets in {directory}; name the run (tatu status RUN)")
    names = ", ".join(p.stem for p in candidates)
    raise ControlError(f"tatu: several runs in {directory} ({names}); name one (tatu status RUN)")


def answers(path: Path | str, timeout: float = 5.0) -> bool:
    """A daemon listens at `path`: a connect succeeds (no reply awaited, so a daemon busy in an
    eval on a loaded machine still counts as alive)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        sock.close()

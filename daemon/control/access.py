"""Who may reach the control socket, and where it lives.

The socket sits in a directory that is ours and 0700, is itself 0600 from the moment it
exists, and a live daemon's socket is never stolen. Who may connect: the daemon's own uid,
and root (root can read the process's memory anyway, refusing it protects nothing), checked
per connection with SO_PEERCRED.

Never stolen, even by a daemon starting at the same moment: the socket's path is claimed by an
exclusive flock on a hidden file beside it (`.<run>.sock.lock`), held from before the live-check
until the socket is gone. Without it two daemons could both find no listener and bind in turn,
the second replacing the first's socket; or one could find the other bound but not yet listening
and take it for a killed daemon's. The kernel drops the flock when its process dies, kill -9
included; the file itself stays (removing it would race the next claim).
"""
from __future__ import annotations

import fcntl
import os
import socket
import stat
import struct
from pathlib import Path

from tatu.daemon.control.protocol import MAX_CONNECTIONS

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


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


class SocketTaken(RuntimeError):
    """Another daemon holds this socket path: it listens there, or is binding it now."""


def claim_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")  # hidden: never one of the `*.sock` a client lists


def claim(path: Path) -> int:
    """The flock that makes `path` this process's to bind (an fd; closing it releases the claim), or
    SocketTaken when another daemon holds it."""
    fd = os.open(claim_path(path), os.O_RDWR | os.O_CREAT, 0o600)  # non-inheritable: no child holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SocketTaken(f"another daemon is already listening at {path}") from None
    return fd


def refuse_if_live(path: Path) -> None:
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
    raise SocketTaken(f"another daemon is already listening at {path}")

def bind_private(path: Path) -> socket.socket:
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

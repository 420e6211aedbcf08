"""Client side of the control socket, and `tatu status [RUN] [--json] [--watch [SECONDS]]`."""
from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path

from tatu.daemon.control import MAX_REQUEST_BYTES, PROTOCOL_VERSION, socket_path
from tatu.formats import fmt_pct

# Replies (the evals history) can be much longer than requests.
_MAX_REPLY_BYTES = 64 * 1024 * 1024


class ControlError(RuntimeError):
    """The daemon could not be reached, or it answered ok=false."""


def request(path: Path | str, cmd: str, timeout: float = 5.0, **args) -> dict:
    """Send one command to the daemon at `path`; return its reply (ok=true) or raise ControlError."""
    path = Path(path)
    line = json.dumps({"v": PROTOCOL_VERSION, "cmd": cmd, **args}).encode("utf-8") + b"\n"
    if len(line) > MAX_REQUEST_BYTES:
        raise ControlError(f"tatu: request {cmd!r} is {len(line)} bytes, over the {MAX_REQUEST_BYTES}-byte limit")
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
    if not isinstance(decoded, dict) or decoded.get("ok") is not True:
        error = decoded.get("error") if isinstance(decoded, dict) else decoded
        raise ControlError(f"tatu: the daemon refused {cmd!r}: {error}")
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


# -- formatting ---------------------------------------------------------------------

def _pct(fraction) -> str:
    return fmt_pct(fraction)


def _num(value, digits: int = 4) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a"
    return f"{value:.{digits}f}"


def _duration(seconds) -> str:
    if not isinstance(seconds, (int, float)) or seconds < 0:
        return "n/a"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _interval(lo, hi, fmt) -> str:
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        return f" [{fmt(lo)}, {fmt(hi)}]"
    return ""


def format_status(status: dict) -> str:
    """A few readable lines from a status reply; missing fields show as n/a or are left out."""
    lines = []
    step, limit = status.get("step"), status.get("limit")
    progress = f"step {step if step is not None else '?'}/{limit if limit is not None else '?'}"
    if isinstance(step, int) and isinstance(limit, int) and limit > 0:
        progress += f" ({100 * step / limit:.0f}%)"
    lines.append(f"{status.get('run', '?')}  pid {status.get('pid', '?')}  phase {status.get('phase', '?')}  {progress}")
    speed = status.get("tokens_per_s")
    lines.append(f"speed   {_num(speed, 0)} tok/s  ETA {_duration(status.get('eta_s'))}")

    last = status.get("last_eval")
    if isinstance(last, dict):
        parts = []
        for name, metrics in (last.get("sets") or {}).items():
            if isinstance(metrics, dict):
                parts.append(f"{name} {_num(metrics.get('ppl'))}{_interval(metrics.get('lo'), metrics.get('hi'), _num)}")
        lines.append(f"eval    @ step {last.get('step', '?')}: " + ("  ".join(parts) or "no sets"))
        drift_line = f"        drift {_pct(last.get('drift'))}{_interval(last.get('drift_lo'), last.get('drift_hi'), _pct)}"
        drift_line += f"  drift_tronco {_pct(last.get('drift_tronco'))}"
        lines.append(drift_line)
    else:
        lines.append("eval    none yet")

    best = status.get("best")
    if isinstance(best, dict):
        # by sftHeld in an SFT run, by ptVal in a trunk's pretraining
        metric = next((k for k in ("sftHeld", "ptVal") if k in best), "sftHeld")
        lines.append(f"best    step {best.get('step', '?')}  {metric} {_num(best.get(metric))}")
    if "drift" in status or "drift_tronco" in status:
        lines.append(f"drift   {_pct(status.get('drift'))}  drift_tronco {_pct(status.get('drift_tronco'))}")

    memory = status.get("memory")
    if isinstance(memory, dict):
        lines.append(f"memory  rss {_num(memory.get('rss_mb'), 0)} MB  available {_num(memory.get('available_mb'), 0)} MB"
                     f"  swap used {_num(memory.get('swap_used_mb'), 0)} MB")
    oom = status.get("oom_score_adj")
    if oom is not None:
        note = "" if isinstance(oom, int) and oom < 0 else "  (not protected from the OOM killer: see tatu doctor)"
        lines.append(f"oom_score_adj {oom}{note}")
    if status.get("trainable"):
        lines.append(f"trains  {status['trainable']}")
    if status.get("config_hash"):
        lines.append(f"config  {status['config_hash']}")
    return "\n".join(lines)


# -- CLI ----------------------------------------------------------------------------

def add_status_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("run", nargs="?", help="run name (default: the only running run)")
    parser.add_argument("--json", action="store_true", help="print the raw status reply as JSON")
    parser.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
                        help="refresh every SECONDS (default 2) until Ctrl-C")
    parser.add_argument("--socket", help="control socket path (default: derived from RUN)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for a reply")
    return parser


def status_main(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    if args.watch is not None and not args.watch > 0:
        print(f"tatu: --watch interval must be > 0, got {args.watch}", file=sys.stderr)
        return 2
    try:
        path = resolve_socket(args.run, args.socket)
    except (ControlError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        return _status_loop(path, args, out)
    except KeyboardInterrupt:
        return 0 if args.watch is not None else 130


def _status_loop(path: Path, args: argparse.Namespace, out) -> int:
    while True:
        try:
            status = request(path, "status", timeout=args.timeout)
            text = json.dumps(status, indent=2, sort_keys=True) if args.json else format_status(status)
            code = 0
        except ControlError as exc:
            if args.watch is None:
                print(exc, file=sys.stderr)
                return 1
            text, code = str(exc), 1  # keep watching: the unit may be restarting
        if args.watch is None:
            print(text, file=out)
            return code
        if out.isatty():
            out.write("\033[H\033[J")
        print(time.strftime("%H:%M:%S"), file=out)
        print(text, file=out, flush=True)
        time.sleep(args.watch)

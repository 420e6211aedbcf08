"""Does a busy client slow training? Steps/min of a run while N local clients flood its control
socket vs the same run unloaded (issue 28: 20 clients cut a run to 37% before the limits).

One daemon (`python -m tatu.daemon`, the demo-size model of bench/overhead.py, 1 torch thread,
no eval or save inside the run's horizon) trains throughout; the benchmark alternates windows of
--seconds each: A, no client at all; B, --clients processes, each sending malformed requests
(the kinds tests/daemon/test_control_limits.py sends) on its own connection as fast as the
replies come. Same run, same process, same machine, windows interleaved (A B A B ...) so a shared
host's load falls on both sides. Per window: the steps the run logged (its events.jsonl) per
minute, and the daemon's CPU seconds (its whole process: the control thread's share is the
difference between B and A). The ratio is median(B) / median(A) steps/min; target >= 0.90.
On a shared host the CPU the daemon gets swings with the other tenants' load, so a second
ratio is printed beside it: steps per CPU second of the daemon, B vs A, which the load moves
far less and which the control thread's work lowers directly.

Prints what it measured; asserts nothing about timing (exit 0 unless the run or a client fails,
or a request went unanswered).

    .venv/bin/python -u bench/control_flood.py [--clients 20] [--seconds 20] [--rounds 2] [--reconnect]

--reconnect: each client connects anew for every request, so a connection's own bucket is always
fresh; what bounds it is its uid's bucket (protocol.py's UID_RATE_*).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # tiny_world: the synthetic data the daemon tests use
sys.path.insert(0, str(ROOT / "bench"))  # overhead: the demo-size seed and run settings

from overhead import DEMO_MODEL, SEQ_LEN, build_seed, run_env  # noqa: E402
from tiny_world import clean_environ, write_sources  # noqa: E402

from tatu.daemon.control.access import socket_path  # noqa: E402
from tatu.daemon.control.client import request  # noqa: E402
from tatu.daemon.control.protocol import (  # noqa: E402
    MAX_CONNECTIONS, RATE_BURST, RATE_PER_S, UID_RATE_BURST, UID_RATE_PER_S,
)
from tatu.ops.demo import prepare_data  # noqa: E402

# What both clients share: the malformed requests they send, their counts, SIGTERM to stop, and
# how a reply line is counted. No tatu import: a client is any local script.
CLIENT_COMMON = r'''
import json, signal, socket, sys, time
kinds = [b"not json", b"{", b"[1,2]", b'{"v":1}', b'{"v":1,"cmd":"nope"}', b'{"v":2,"cmd":"status"}', b"\xff\xfe"]
counts = {"sent": 0, "errors": 0, "rate_limited": 0, "ok": 0, "refused": 0, "unanswered": ""}
stopping = False
def stop(*_):
    global stopping
    stopping = True
signal.signal(signal.SIGTERM, stop)
def count(line):
    # one reply line counted: "eof" when there is none (the server closed), "refused" over MAX_CONNECTIONS
    if not line:
        counts["unanswered"] = "EOF"
        return "eof"
    reply = json.loads(line)
    if reply["ok"]:
        counts["ok"] += 1
    elif reply["error"] == "rate limited":
        counts["rate_limited"] += 1
    elif reply["error"].startswith("too many clients"):
        counts["refused"] += 1
        return "refused"
    else:
        counts["errors"] += 1
    return ""
'''

# A client on one connection: each request sent the moment the previous reply arrived, until
# SIGTERM; then its counts as one JSON line.
FLOOD_CLIENT = CLIENT_COMMON + r'''
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(30)
sock.connect(sys.argv[1])
replies = sock.makefile("rb")
print("connected", flush=True)
try:
    while not stopping:
        sock.sendall(kinds[counts["sent"] % len(kinds)] + b"\n")
        counts["sent"] += 1
        if count(replies.readline()):
            break
except Exception as exc:  # noqa: BLE001 -- a reset socket or a cut line alike: said in the counts
    counts["unanswered"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(counts), flush=True)
'''

# --reconnect: the same requests, each on a connection of its own (connect, one line, its reply,
# close), the next at once; a refusal (over MAX_CONNECTIONS) or `rate limited` is counted and the
# client connects again without waiting (it ignores retry_after_s: the worst script of the uid).
RECONNECT_CLIENT = CLIENT_COMMON + r'''
print("connected", flush=True)
try:
    while not stopping:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            try:
                sock.connect(sys.argv[1])
            except BlockingIOError:  # the listen backlog is full: not a request yet; try again
                time.sleep(0.01)
                continue
            sock.sendall(kinds[counts["sent"] % len(kinds)] + b"\n")
            counts["sent"] += 1
            line = sock.makefile("rb").readline()
        if count(line) == "eof":
            break
except Exception as exc:  # noqa: BLE001 -- whatever it is, it is said in the counts
    counts["unanswered"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(counts), flush=True)
'''


@dataclass
class Window:
    kind: str  # "A" unloaded, "B" flooded
    seconds: float
    steps: int
    cpu_s: float  # the daemon process's user + system CPU seconds

    @property
    def steps_per_min(self) -> float:
        return self.steps / self.seconds * 60

    @property
    def steps_per_cpu_s(self) -> float:
        return self.steps / max(self.cpu_s, 1e-9)


class Steps:
    """The run's last logged step, read incrementally from its events.jsonl."""

    def __init__(self, path: Path):
        self.path, self.offset, self.last = path, 0, 0

    def __call__(self) -> int:
        if self.path.is_file():
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                for line in f:
                    if not line.endswith(b"\n"):
                        break  # a line still being written: read it next time
                    self.offset += len(line)
                    event = json.loads(line)
                    if event.get("event") == "step":
                        self.last = event["step"]
        return self.last


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def measure(kind: str, seconds: float, steps: Steps, pid: int) -> Window:
    s0, c0, t0 = steps(), cpu_seconds(pid), time.monotonic()
    deadline = t0 + seconds
    while time.monotonic() < deadline:
        time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))  # the window's length is the measurement
        steps()
    s1, c1, t1 = steps(), cpu_seconds(pid), time.monotonic()
    return Window(kind, t1 - t0, s1 - s0, c1 - c0)


def start_clients(n: int, path: Path, reconnect: bool = False) -> list[subprocess.Popen]:
    script = RECONNECT_CLIENT if reconnect else FLOOD_CLIENT
    clients = [subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True)
               for _ in range(n)]
    for client in clients:  # every one connected before the window opens
        if client.stdout.readline().strip() != "connected":
            sys.exit(f"control_flood: a client failed to connect (exit {client.wait()})")
    return clients


def stop_clients(clients: list[subprocess.Popen]) -> list[dict]:
    for client in clients:
        client.send_signal(signal.SIGTERM)
    counts = []
    for client in clients:
        out, _ = client.communicate(timeout=60)
        counts.append(json.loads(out.strip().splitlines()[-1]))
    return counts


def wait_for_steps(steps: Steps, proc: subprocess.Popen, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while steps() < n:
        if proc.poll() is not None:
            sys.exit(f"control_flood: the daemon exited {proc.returncode}:\n{proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            sys.exit(f"control_flood: no step {n} after {timeout:.0f}s")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=20, help="flooding client processes in each B window")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each A and each B window")
    parser.add_argument("--rounds", type=int, default=2, help="A/B pairs; odd rounds run B first")
    parser.add_argument("--warmup-steps", type=int, default=10, help="steps the run takes before the first window")
    parser.add_argument("--reconnect", action="store_true",
                        help="each client connects anew for every request (the per-uid limit's case)")
    args = parser.parse_args(argv)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    print(f"{cpu}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.clients} clients, "
          f"{args.rounds} x (A {args.seconds:g}s + B {args.seconds:g}s); limits: {MAX_CONNECTIONS} clients, "
          f"{RATE_BURST} requests at once then {RATE_PER_S:g}/s per connection, {UID_RATE_BURST} then "
          f"{UID_RATE_PER_S:g}/s per uid; {'reconnecting for every request' if args.reconnect else 'one connection each'}")
    with tempfile.TemporaryDirectory(prefix="tatu-flood-", dir="/tmp") as tmp:  # /tmp: AF_UNIX's path limit
        work = Path(tmp)
        data = prepare_data(write_sources(work / "sources"), work, "char", 0, SEQ_LEN)
        seed = build_seed(work / "seed", work / "tokenizer.json", DEMO_MODEL, seed=0)
        run = f"flood{os.getpid()}"
        runtime = work / "rt"
        runtime.mkdir(mode=0o700)
        env = {**clean_environ(), **run_env(data, work / "runs", seed, run, 999_999, DEMO_MODEL),
               "TATU_THREADS": "1", "RUNTIME_DIRECTORY": str(runtime)}
        path = socket_path(run, {"RUNTIME_DIRECTORY": str(runtime)})
        proc = subprocess.Popen([sys.executable, "-m", "tatu.daemon"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        steps = Steps(work / "runs" / run / "events.jsonl")
        windows: list[Window] = []
        totals = {"sent": 0, "errors": 0, "rate_limited": 0, "ok": 0, "refused": 0}
        unanswered = []
        try:
            wait_for_steps(steps, proc, args.warmup_steps, timeout=600)
            for r in range(args.rounds):
                for kind in ("A", "B") if r % 2 == 0 else ("B", "A"):
                    if kind == "A":
                        windows.append(measure("A", args.seconds, steps, proc.pid))
                    else:
                        clients = start_clients(args.clients, path, args.reconnect)
                        windows.append(measure("B", args.seconds, steps, proc.pid))
                        counts = stop_clients(clients)
                        for c in counts:
                            for key in totals:
                                totals[key] += c[key]
                            if c["unanswered"]:
                                unanswered.append(c["unanswered"])
                    w = windows[-1]
                    print(f"  round {r + 1} {w.kind}: {w.steps} steps in {w.seconds:.1f}s = {w.steps_per_min:.1f} "
                          f"steps/min; daemon CPU {w.cpu_s:.1f}s; load average {os.getloadavg()[0]:.1f}"
                          + (f"; clients: {sum(c['sent'] for c in counts) / w.seconds:.0f} requests/s"
                             if w.kind == "B" else ""))
            request(path, "stop", timeout=30)
            if proc.wait(timeout=300) != 0:
                sys.exit(f"control_flood: the daemon exited {proc.returncode}:\n{proc.stderr.read()[-2000:]}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    a = [w for w in windows if w.kind == "A"]
    b = [w for w in windows if w.kind == "B"]
    a_rate, b_rate = statistics.median(w.steps_per_min for w in a), statistics.median(w.steps_per_min for w in b)
    ratio = b_rate / a_rate
    per_round = ", ".join(f"{wb.steps_per_min / wa.steps_per_min:.3f}" for wa, wb in zip(a, b))
    flood_s = sum(w.seconds for w in b)
    print(f"  clients in all B windows: {totals['sent']} requests ({totals['sent'] / flood_s:.0f}/s), "
          f"{totals['errors']} error replies, {totals['rate_limited']} rate limited, {totals['refused']} refused, "
          f"{totals['ok']} ok, {len(unanswered)} unanswered")
    print(f"  daemon CPU per window: A {statistics.median(w.cpu_s for w in a):.1f}s, "
          f"B {statistics.median(w.cpu_s for w in b):.1f}s (median)")
    print(f"  per-round ratios (B/A): {per_round}")
    cpu_ratio = statistics.median(w.steps_per_cpu_s for w in b) / statistics.median(w.steps_per_cpu_s for w in a)
    print(f"  steps per daemon CPU second: A {statistics.median(w.steps_per_cpu_s for w in a):.3f}, "
          f"B {statistics.median(w.steps_per_cpu_s for w in b):.3f} (median), ratio {cpu_ratio:.3f}")
    print(f"  target: ratio >= 0.90 {'met' if ratio >= 0.90 else 'NOT met'}")
    print(f"control_flood: {args.clients} {'reconnecting' if args.reconnect else 'flooding'} clients {b_rate:.1f} vs unloaded {a_rate:.1f} steps/min, "
          f"ratio {ratio:.3f} (per CPU second {cpu_ratio:.3f}); load average now {os.getloadavg()[0]:.1f}")
    if unanswered:
        print(f"control_flood: requests went unanswered: {unanswered[:5]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

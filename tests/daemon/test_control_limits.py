"""What a busy client may cost the daemon (issue 28): a token bucket per connection, a cap on
clients at once, and a live run that keeps training while many clients flood its socket.

The limits are daemon/control/protocol.py's constants; the expectations below are derived from them
and from the clock the client reads, never from the server's own bookkeeping alone."""
from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tiny_world import clean_environ, sft_env, wait_for

from tatu.daemon import memory
from tatu.daemon.config import load_config
from tatu.daemon.control.server import ControlServer
from tatu.daemon.control.access import socket_path
from tatu.daemon.control.client import ControlError, request
from tatu.daemon.control.connection import RESUME_TICK_S, TokenBucket
from tatu.daemon.control.protocol import (MAX_CONNECTIONS, RATE_BURST, RATE_PER_S, UID_RATE_BURST, UID_RATE_PER_S,
                                          nesting_depth)
from tatu.daemon.logs import read_events
from tatu.daemon.supervisor import MEMORY_SAMPLE_S, Supervisor

MALFORMED = (b"not json", b"{", b"[1,2]", b'{"v":1}', b'{"v":1,"cmd":"nope"}', b'{"v":2,"cmd":"status"}', b"\xff\xfe")
# The longest a rate-limited connection waits: one token's refill, rounded up to the resume grid.
LONGEST_RETRY_S = 1 / RATE_PER_S + RESUME_TICK_S
NEWLINE = b"\n"


@pytest.fixture
def short_dir():
    # AF_UNIX paths are limited to 107 bytes; pytest's tmp_path can be longer.
    directory = Path(tempfile.mkdtemp(prefix="tatu-lim-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def server(short_dir):
    handlers = {"status": lambda _r: {"phase": "training"}, "echo": lambda r: {"got": r.get("x")}}
    srv = ControlServer(short_dir / "rt" / "t.sock", handlers).start()
    yield srv
    srv.close()


def connect(path: Path, timeout: float = 30.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(path))
    return sock


def read_lines(sock: socket.socket, n: int) -> list[dict]:
    """The next n reply lines (the socket's timeout bounds each wait)."""
    data = b""
    while data.count(b"\n") < n:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {data.count(NEWLINE)} of {n} replies"
        data += chunk
    return [json.loads(line) for line in data.split(b"\n")[:n]]


def is_rate_limited(reply: dict) -> bool:
    if reply.get("error") != "rate limited":
        return False
    assert set(reply) == {"v", "ok", "error", "retry_after_s"} and reply["v"] == 1 and reply["ok"] is False, reply
    assert 0 < reply["retry_after_s"] <= LONGEST_RETRY_S + 1e-9, reply
    return True


# -- the token bucket, on a clock of our own -----------------------------------------------

def test_token_bucket_gives_the_burst_then_the_rate():
    bucket = TokenBucket(rate=4.0, burst=3, now=100.0)
    assert [bucket.take(100.0) for _ in range(3)] == [0.0, 0.0, 0.0]  # the burst at once
    assert bucket.take(100.0) == pytest.approx(0.25)  # empty: one token is 1/rate away
    assert bucket.take(100.1) == pytest.approx(0.15)  # a refusal spends nothing
    assert bucket.take(100.25) == 0.0
    assert bucket.take(100.25) == pytest.approx(0.25)
    assert [bucket.take(1000.0) for _ in range(4)][:3] == [0.0, 0.0, 0.0]  # a long idle refills to the burst, no more
    assert bucket.take(1000.0) > 0


@pytest.mark.parametrize("send_rate", [1.0, 10.0, 1000.0])
def test_token_bucket_admits_burst_plus_rate_times_time_of_a_steady_sender(send_rate):
    """Independent expectation: a sender at a steady rate for T seconds gets
    min(sent, burst + floor(rate * T)) requests through (a sender below the rate loses none)."""
    rate, burst, seconds = 5.0, 8, 20.0
    bucket = TokenBucket(rate, burst, now=0.0)
    times = [i / send_rate for i in range(int(seconds * send_rate))]
    admitted = sum(bucket.take(t) == 0.0 for t in times)
    assert admitted == min(len(times), burst + int(rate * times[-1]))


# -- one connection over its rate ------------------------------------------------------------

def test_a_connection_over_its_rate_gets_error_replies_and_stays_usable(server):
    extra = 40
    sock = connect(server.path)
    started = time.monotonic()
    sock.sendall(b"".join(b'{"v":1,"cmd":"echo","x":%d}\n' % i for i in range(RATE_BURST + extra)))
    replies = read_lines(sock, RATE_BURST + extra)
    elapsed = time.monotonic() - started
    # One reply per request, in order: its echo, or `rate limited` (that request not handled).
    for i, reply in enumerate(replies):
        assert reply == {"v": 1, "ok": True, "got": i} or is_rate_limited(reply), (i, reply)
    assert all(r["ok"] for r in replies[:RATE_BURST])  # the bucket starts full
    handled = sum(r["ok"] for r in replies)
    # Whatever the host's load: no more than the burst plus what refilled while we waited.
    assert handled <= RATE_BURST + RATE_PER_S * elapsed + 1, (handled, elapsed)
    assert handled + server.rate_limited == RATE_BURST + extra
    # Not dropped: the same connection is served again. A request sent right after a `rate
    # limited` reply is read only once a token is back, so it is answered (a second try at most:
    # the last reply above may have been an echo that spent the token).
    answers = []
    while len(answers) < 2 and not (answers and answers[-1]["ok"]):
        sock.sendall(b'{"v":1,"cmd":"status"}\n')
        answers += read_lines(sock, 1)
    assert answers[-1] == {"v": 1, "ok": True, "phase": "training"}, answers
    assert all(is_rate_limited(a) for a in answers[:-1])
    sock.close()


def test_malformed_requests_spend_tokens_too(server):
    sock = connect(server.path)
    valid = 20
    started = time.monotonic()
    sock.sendall(b"".join(MALFORMED[i % len(MALFORMED)] + b"\n" for i in range(RATE_BURST))
                 + b'{"v":1,"cmd":"status"}\n' * valid)
    replies = read_lines(sock, RATE_BURST + valid)
    elapsed = time.monotonic() - started
    assert all(r["ok"] is False and r["error"] != "rate limited" for r in replies[:RATE_BURST])
    answered = sum(r["ok"] for r in replies[RATE_BURST:])
    assert answered <= RATE_PER_S * elapsed + 1, (answered, elapsed)  # the garbage took the burst
    assert all(r["ok"] or is_rate_limited(r) for r in replies[RATE_BURST:])
    sock.close()


def test_a_flooding_client_costs_the_server_a_bounded_number_of_replies(server):
    """A client that sends its next request the moment a reply comes: the server answers at most
    the burst, the rate, and one `rate limited` per pause (a pause lasts until a token is back)."""
    sock = connect(server.path)
    started = time.monotonic()
    sent = 0
    while server.rate_limited < 5 and time.monotonic() < started + 60:
        sock.sendall(MALFORMED[sent % len(MALFORMED)] + b"\n")
        read_lines(sock, 1)
        sent += 1
    elapsed = time.monotonic() - started
    assert server.rate_limited >= 5, "the flood never met the limit"
    refilled = RATE_PER_S * elapsed + 1
    assert server.requests_handled <= RATE_BURST + refilled, (server.requests_handled, elapsed)
    assert server.rate_limited <= refilled, (server.rate_limited, elapsed)
    assert sent == server.requests_handled + server.rate_limited  # every request answered
    sock.close()


def test_clients_that_reconnect_for_each_request_share_their_uids_bucket(server):
    """A fresh connection is a fresh connection bucket, not a fresh uid bucket: clients of one uid that
    reconnect for every request are answered the uid's burst, then its rate, then `rate limited`."""
    extra, n_clients = 60, 8
    replies: list[dict] = []
    lock, started = threading.Lock(), time.monotonic()

    def reconnecting(count: int) -> None:
        for i in range(count):
            with connect(server.path) as sock:
                sock.sendall(b'{"v":1,"cmd":"echo","x":%d}\n' % i)
                (reply,) = read_lines(sock, 1)
            with lock:
                replies.append(reply)
    share = (UID_RATE_BURST + extra) // n_clients + 1
    threads = [threading.Thread(target=reconnecting, args=(share,)) for _ in range(n_clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    elapsed = time.monotonic() - started
    assert len(replies) == share * n_clients  # every request answered
    ok = sum(r["ok"] for r in replies)
    assert all(r["ok"] or is_rate_limited(r) for r in replies)
    assert sum(map(is_rate_limited, replies)) >= 1
    assert ok == server.requests_handled <= UID_RATE_BURST + UID_RATE_PER_S * elapsed + 1, (ok, elapsed)
    assert UID_RATE_BURST >= RATE_BURST  # one connection's burst is never cut by its uid's


def thread_cpu_s(native_id: int) -> float:
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_a_paused_connection_costs_the_server_thread_no_cpu(server):
    """While a connection waits for its tokens the server thread sleeps (no spinning on a socket
    it will not read): its CPU time over the wait is a small part of the wait."""
    sock = connect(server.path)
    extra = 20
    before, started = thread_cpu_s(server._thread.native_id), time.monotonic()
    sock.sendall(b'{"v":1,"cmd":"status"}\n' * (RATE_BURST + extra))
    replies = read_lines(sock, RATE_BURST + extra)
    elapsed, cpu = time.monotonic() - started, thread_cpu_s(server._thread.native_id) - before
    assert sum(is_rate_limited(r) for r in replies) >= 1
    assert cpu <= 0.25 * elapsed + 0.05, (cpu, elapsed)
    sock.close()


# -- what a status reply costs the loop ---------------------------------------------------------

def test_status_replies_come_from_the_snapshot_the_loop_published(short_dir, monkeypatch):
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_dir / "rt"))
    cfg, _ = load_config({"TATU_DATA": "d", "TATU_MODE": "pretrain", "TATU_RUN": "snap", "TATU_OUT": str(short_dir)})
    samples = []
    real_sample = memory.sample
    monkeypatch.setattr(memory, "sample", lambda: samples.append(1) or real_sample())
    with Supervisor(cfg, {}) as supervisor:
        path = supervisor._server.path
        supervisor.begin(5)
        published = supervisor._snapshot
        supervisor.status["step"] = 6  # the loop's working copy, changed but not yet published
        assert request(path, "status")["step"] == 5
        with pytest.raises(TypeError):
            published.progress["step"] = 7  # type: ignore[index]  (a snapshot cannot be changed)
        supervisor.phase("training")  # a publish
        reply = request(path, "status")
        assert (reply["step"], reply["phase"], reply["run"]) == (6, "training", "snap")
        assert published.progress["step"] == 5 and published.progress["phase"] == "loading"
        # However many clients ask, the host is sampled (psutil, statvfs) at most once per MEMORY_SAMPLE_S.
        samples.clear()
        started = time.monotonic()
        with connect(path) as sock:
            sock.sendall(b'{"v":1,"cmd":"status"}\n' * 50)
            replies = read_lines(sock, 50)
        elapsed = time.monotonic() - started
        assert all(r["ok"] and r["memory"]["rss_mb"] > 0 for r in replies)
        assert len(samples) <= 1 + elapsed / MEMORY_SAMPLE_S, (len(samples), elapsed)


# -- clients at once ------------------------------------------------------------------------------

def test_the_client_over_the_cap_gets_a_one_line_refusal_then_eof(server):
    held = [connect(server.path) for _ in range(MAX_CONNECTIONS)]
    for sock in held:  # every one of them is being served (so counted)
        sock.sendall(b'{"v":1,"cmd":"status"}\n')
        assert read_lines(sock, 1)[0]["ok"] is True
    extra = connect(server.path)
    extra.sendall(b'{"v":1,"cmd":"status"}\n')  # a request already sent is no reason to lose the reply
    data = b""
    while chunk := extra.recv(65536):
        data += chunk
    lines = data.split(b"\n")
    assert len(lines) == 2 and lines[1] == b"", data  # one line, then EOF
    refusal = json.loads(lines[0])
    assert refusal == {"v": 1, "ok": False, "error": f"too many clients: {MAX_CONNECTIONS} are connected; try again later"}
    assert server.refused_clients == 1
    extra.close()
    with pytest.raises(ControlError, match="too many clients"):
        request(server.path, "status")
    # A slot freed is a slot for the next client (the server sees the close when it gets to it).
    held.pop().close()

    def served():
        try:
            return request(server.path, "status")["ok"]
        except ControlError as exc:
            assert "too many clients" in str(exc)
            return False

    wait_for(served, 30, "a client served once a slot is free")
    for sock in held:  # the others were never disturbed
        sock.sendall(b'{"v":1,"cmd":"status"}\n')
        assert read_lines(sock, 1)[0]["ok"] is True
        sock.close()


# -- a live run under a flood ---------------------------------------------------------------------

@dataclass
class Tally:
    """One flooding client's view: what it sent and what came back."""
    sent: int = 0
    errors: int = 0
    rate_limited: int = 0
    ok: int = 0
    refused: bool = False
    silent: str = ""  # how a request went unanswered, if one did


def send_and_read(sock: socket.socket, replies, payload: bytes, tally: Tally) -> dict | None:
    """One request, its reply; None (and `tally.silent` says how) if the connection ended instead."""
    sock.sendall(payload + b"\n")
    tally.sent += 1
    line = replies.readline()
    if not line:
        tally.silent = f"EOF instead of the reply to request {tally.sent}"
        return None
    reply = json.loads(line)
    if reply["ok"]:
        tally.ok += 1
    elif reply["error"].startswith("too many clients"):
        tally.refused = True
    elif is_rate_limited(reply):
        tally.rate_limited += 1
    else:
        tally.errors += 1
    return reply


def flood(sock: socket.socket, stop: threading.Event, tally: Tally) -> None:
    """Malformed requests on an admitted connection as fast as replies come, until `stop`."""
    payloads = itertools.cycle(MALFORMED)
    try:
        with sock, sock.makefile("rb") as replies:
            while not stop.is_set():
                if send_and_read(sock, replies, next(payloads), tally) is None:
                    return  # the connection ended: tally.silent says how
    except OSError as exc:  # a reset, a broken pipe, a timeout: no reply is a silent drop
        tally.silent = f"{type(exc).__name__}: {exc} after {tally.sent} requests"


@pytest.mark.slow
def test_a_live_run_keeps_training_while_many_clients_flood_its_socket(tiny_trunk, tmp_path):
    """More unthrottled clients than the cap, each sending malformed requests as fast as replies
    come, against a real daemon: every request gets a reply (an error, `rate limited`, or the
    refusal of a client over the cap), none is dropped in silence, and the run takes steps."""
    n_clients = MAX_CONNECTIONS + 8
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    env = {**clean_environ(), "RUNTIME_DIRECTORY": str(runtime), "TATU_THREADS": "1",
           **sft_env(tiny_trunk, tmp_path, TATU_RUN="flood", MIX_STEPS_LIMIT=1_000_000, EVAL_EVERY=1_000_000,
                     TATU_CKPT_EVERY=1_000_000)}
    path = socket_path("flood", {"RUNTIME_DIRECTORY": str(runtime)})
    events = tmp_path / "flood" / "events.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "tatu.daemon"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)

    def steps() -> int:
        return max((e["step"] for e in read_events(events) if e["event"] == "step"), default=0) if events.is_file() else 0

    stop, tallies, threads = threading.Event(), [Tally() for _ in range(n_clients)], []
    try:
        wait_for(lambda: steps() >= 1 or proc.poll() is not None, 180, "the run's first step")
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        before = steps()
        # Every client connects and is answered once before any floods: a connection is admitted with
        # one of its uid's tokens, and one that finds the flood has spent them is answered `rate
        # limited` and closed (protocol.py), so which clients a concurrent start admits depends on
        # the thread schedule; this way the cap alone decides, and every client is one of the uid's.
        admitted = []
        for tally in tallies:
            sock = connect(path)
            with sock.makefile("rb") as replies:
                send_and_read(sock, replies, MALFORMED[0], tally)
            if tally.refused or tally.silent:
                sock.close()
            else:
                admitted.append((sock, tally))
        threads = [threading.Thread(target=flood, args=(sock, stop, t), daemon=True) for sock, t in admitted]
        for thread in threads:
            thread.start()
        served = lambda: [t for t in tallies if not t.refused]  # noqa: E731
        # Flood until every served client has met its limit and the run has taken steps meanwhile.
        wait_for(lambda: proc.poll() is not None or any(t.silent for t in tallies)
                 or (steps() >= before + 3 and all(t.rate_limited >= 1 for t in served())), 180,
                 "every client rate-limited and 3 steps taken during the flood")
        during = steps() - before
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    try:
        assert proc.poll() is None, f"the daemon died under the flood: {proc.stderr.read()[-2000:]}"
        assert [t.silent for t in tallies if t.silent] == []
        assert sum(t.refused for t in tallies) == n_clients - MAX_CONNECTIONS
        for t in served():
            # Every request sent got its reply (the last one may have been cut by `stop`: no).
            assert t.sent == t.errors + t.rate_limited and t.ok == 0 and t.rate_limited >= 1, t
        assert during >= 3
        assert request(path, "stop")["ok"]
        assert proc.wait(timeout=120) == 0, proc.stderr.read()[-2000:]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


# -- the depth check's cost ------------------------------------------------------------------------

def reference_depth(line: bytes) -> int:
    """The definition, a byte at a time: [ and { open, ] and } close, outside JSON strings."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in line:
        if in_string:
            if escaped:
                escaped = False
            elif byte == ord("\\"):
                escaped = True
            elif byte == ord('"'):
                in_string = False
        elif byte == ord('"'):
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def test_nesting_depth_equals_the_byte_by_byte_definition():
    rng = random.Random(28)
    alphabet = b'[]{}"\\ax'
    lines = [bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 40))) for _ in range(20_000)]
    lines += [b"[" * 5000, b'"\\' + b"[" * 9, b'["\\"[[[', b'}}}[[', bytes(rng.randrange(256) for _ in range(5000))]
    assert [nesting_depth(line) for line in lines] == [reference_depth(line) for line in lines]

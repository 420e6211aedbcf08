"""Notifier against a real AF_UNIX datagram socket standing in for systemd's NOTIFY_SOCKET, and
the STATUS texts a whole run sends (the real-systemd half is tests/systemd/test_sft_unit.py)."""
import os
import re
import select
import socket
import tempfile
import threading

import pytest

from tiny_world import daemon, sft_env

from tatu.daemon.notify import Notifier, to_ascii, watchdog_usec


@pytest.fixture
def notify_socket(monkeypatch):
    # A short directory: AF_UNIX paths are limited to 107 bytes and tmp_path can be longer.
    directory = tempfile.mkdtemp(prefix="tatu-notify-", dir="/tmp")
    path = os.path.join(directory, "notify.sock")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.settimeout(2.0)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    try:
        yield receiver
    finally:
        receiver.close()
        os.unlink(path)
        os.rmdir(directory)


def received(receiver) -> str:
    return receiver.recv(4096).decode("ascii")


def test_each_message_arrives_as_its_own_datagram(notify_socket):
    notifier = Notifier()
    assert notifier.enabled
    assert notifier.ready()
    assert received(notify_socket) == "READY=1"
    assert notifier.feed_watchdog()
    assert received(notify_socket) == "WATCHDOG=1"
    assert notifier.extend_timeout(90)
    assert received(notify_socket) == "EXTEND_TIMEOUT_USEC=90000000"
    assert notifier.extend_timeout(0.5)
    assert received(notify_socket) == "EXTEND_TIMEOUT_USEC=500000"
    assert notifier.stopping()
    assert received(notify_socket) == "STOPPING=1"
    assert notifier.failed_sends == 0


def test_status_with_accents_and_unicode_minus_arrives_as_ascii(notify_socket):
    notifier = Notifier()
    text = "step 37/200 régua 52,1 avaliação drift \u22121.2% 1830 tok/s ETA 12m"
    # The bug this guards against: sdnotify would drop this datagram entirely.
    with pytest.raises(UnicodeEncodeError):
        text.encode("latin-1")
    assert notifier.status(text)
    assert received(notify_socket) == "STATUS=step 37/200 regua 52,1 avaliacao drift -1.2% 1830 tok/s ETA 12m"
    # A watchdog ping after such a status still arrives (nothing was combined with it).
    notifier.feed_watchdog()
    assert received(notify_socket) == "WATCHDOG=1"


def test_status_newlines_cannot_inject_fields(notify_socket):
    Notifier().status("eval done\nREADY=1")
    assert received(notify_socket) == "STATUS=eval done READY=1"


def test_to_ascii_folds_and_drops():
    assert to_ascii("ç ã é ü") == "c a e u"
    assert to_ascii("a\u2013b \u201cq\u201d \u2026") == 'a-b "q" ...'
    assert to_ascii("loss 🔥 ok") == "loss ok"
    assert to_ascii("plain ascii 9.0702") == "plain ascii 9.0702"


def test_without_notify_socket_everything_is_a_silent_no_op(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notifier = Notifier()
    assert not notifier.enabled
    results = [notifier.ready(), notifier.status("ç"), notifier.feed_watchdog(),
               notifier.extend_timeout(5), notifier.stopping(), notifier.set_watchdog_timeout(5)]
    assert results == [False] * len(results)


def test_socket_gone_counts_a_failed_send_instead_of_raising(notify_socket, monkeypatch):
    notifier = Notifier()
    os.unlink(os.environ["NOTIFY_SOCKET"])
    notify_socket.close()
    assert notifier.feed_watchdog() is False
    assert notifier.failed_sends == 1
    # Recreate so the fixture's cleanup can unlink it.
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).bind(os.environ["NOTIFY_SOCKET"])


def test_notify_socket_that_does_not_exist_disables_quietly(monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", "/nonexistent/dir/notify.sock")
    notifier = Notifier()
    assert not notifier.enabled
    assert notifier.ready() is False


def test_watchdog_usec_from_environment(monkeypatch):
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert watchdog_usec() is None
    monkeypatch.setenv("WATCHDOG_USEC", "180000000")
    assert watchdog_usec() == 180_000_000
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert watchdog_usec() == 180_000_000
    # Inherited from a parent that owns the watchdog: not ours to feed.
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert watchdog_usec() is None
    monkeypatch.delenv("WATCHDOG_PID")
    monkeypatch.setenv("WATCHDOG_USEC", "garbage")
    assert watchdog_usec() is None


def test_restore_watchdog_timeout_returns_to_unit_value(notify_socket, monkeypatch):
    monkeypatch.setenv("WATCHDOG_USEC", "180000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    notifier = Notifier()
    assert notifier.watchdog_usec() == 180_000_000
    notifier.set_watchdog_timeout(900)
    assert received(notify_socket) == "WATCHDOG_USEC=900000000"
    assert notifier.restore_watchdog_timeout()
    assert received(notify_socket) == "WATCHDOG_USEC=180000000"


def test_non_positive_timeouts_are_rejected():
    with pytest.raises(ValueError, match="timeout seconds must be > 0"):
        Notifier({}).extend_timeout(0)


def test_watchdog_timeout_is_never_armed_for_a_unit_without_one(notify_socket, monkeypatch):
    """WATCHDOG_USEC= would switch on a watchdog the unit never asked for."""
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    notifier = Notifier()
    assert notifier.set_watchdog_timeout(600) is False
    assert notifier.restore_watchdog_timeout() is False
    assert notifier.ready()
    assert received(notify_socket) == "READY=1"  # nothing was queued before it


@pytest.mark.slow
def test_status_text_says_loading_then_each_baseline_set_then_step_0(tiny_trunk, tmp_path):
    """Every STATUS= datagram in order, read from a real NOTIFY_SOCKET.

    No time is waited out: an AF_UNIX datagram is in the receiver's queue when its sendto()
    returns, so once the daemon has exited everything it sent is queued, and the reader drains
    that queue until it is empty (with a deadline), then stops."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(tmp_path / "notify.sock"))
    messages: list[str] = []
    sender_exited = threading.Event()

    def receive():  # read as systemd does while the run goes on: a full queue would block the sender
        while True:
            readable, _, _ = select.select([listener], [], [], 0.1)
            if readable:
                messages.append(listener.recv(4096).decode())
            elif sender_exited.is_set():
                return  # nothing readable after the sender's exit: the queue is empty for good

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    try:
        proc = daemon({**sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=2, EVAL_EVERY=2), "NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    finally:
        sender_exited.set()
        reader.join(timeout=30)
        listener.close()
    assert not reader.is_alive(), "the reader did not drain the queue within 30 s"
    assert proc.returncode == 0, proc.stderr[-2000:]
    flow = [m for m in messages if m.startswith(("STATUS=", "READY=1")) or m == "WATCHDOG=1"]
    texts = [m.removeprefix("STATUS=") for m in flow if m.startswith("STATUS=")]
    assert texts[:4] == ["loading", "baseline eval 1/3 sets", "baseline eval 2/3 sets", "baseline eval 3/3 sets"], texts
    assert flow.count("READY=1") == 1, flow
    ready = flow.index("READY=1")
    after_ready = flow[ready + 1]
    assert re.fullmatch(r"STATUS=step 0/2 sftHeld \d+\.\d\d drift \+0\.0% first step running", after_ready), flow[ready:]
    # Each finished step: its STATUS, then the watchdog fed; the eval at the last step says so too.
    steps = [t for t in texts if re.fullmatch(r"step [12]/2 sftHeld \d+\.\d\d drift [+-]\d+\.\d% \d+ tok/s ETA \d+m", t)]
    assert [t.split()[1] for t in steps] == ["1/2", "2/2"], texts
    assert flow.count("WATCHDOG=1") >= 2, flow
    assert texts[-3:] == ["step 2/2 eval 1/3 sets", "step 2/2 eval 2/3 sets", "step 2/2 eval 3/3 sets"], texts

"""RunLog: journald priority prefixes only on journald's own stream; run.log and events.jsonl always;
a crash's traceback at error priority."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tiny_world import clean_environ, daemon, sft_env

from tatu.daemon.logs import RunLog, connected_to_journal, read_events


def journal_like_stream(monkeypatch):
    """A real stream socket standing in for journald's, named by JOURNAL_STREAM (dev:ino)."""
    ours, _theirs = socket.socketpair()
    st = os.fstat(ours.fileno())
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    return ours.makefile("w", encoding="utf-8"), _theirs


def test_priority_prefixes_on_the_journal_stream(tmp_path, monkeypatch):
    stream, peer = journal_like_stream(monkeypatch)
    log = RunLog(tmp_path, stream=stream)
    assert log.journal
    log.info("EVAL 8: sftHeld 9.0702 ptVal 31.20")
    log.warning("available memory low")
    log.error("ABORT at step 8")
    stream.flush()
    received = peer.recv(65536).decode()
    assert received.splitlines() == ["<6>EVAL 8: sftHeld 9.0702 ptVal 31.20", "<4>available memory low", "<3>ABORT at step 8"]
    run_log = (tmp_path / "run.log").read_text().splitlines()
    assert run_log[0].endswith("info    EVAL 8: sftHeld 9.0702 ptVal 31.20")  # run.log keeps the line bare
    log.close()


def test_inherited_journal_stream_elsewhere_gets_no_prefix(tmp_path, monkeypatch, capsys):
    _, _peer = journal_like_stream(monkeypatch)  # the variable names another file
    out = open(tmp_path / "out.txt", "w")
    log = RunLog(None, stream=out)
    assert not log.journal and not connected_to_journal(out)
    log.info("EVAL 0: sftHeld 1.0")
    log.error("boom")
    out.close()
    assert (tmp_path / "out.txt").read_text().splitlines() == ["EVAL 0: sftHeld 1.0", "ERROR: boom"]


def test_events_are_json_lines_and_a_torn_line_is_ignored(tmp_path):
    log = RunLog(tmp_path, stream=open(os.devnull, "w"))
    log.event("eval", step=8, drift={"value": 0.012}, loss=float("nan"))
    log.close()
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write('{"event": "step", "ste')  # a kill mid-write
    events = read_events(tmp_path / "events.jsonl")
    assert len(events) == 1 and events[0]["step"] == 8 and events[0]["loss"] is None
    assert json.loads((tmp_path / "events.jsonl").read_text().splitlines()[0])["drift"]["value"] == 0.012


@pytest.mark.slow
def test_an_uncaught_error_is_logged_with_its_traceback_at_error_priority(tiny_trunk, tmp_path):
    """A bug-class failure (here: `state.old` planted as a file, which no save expects) is a
    crash - exit 1, restarted by systemd - with every traceback line at <3> on journald's stream."""
    env = sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=6, EVAL_EVERY=1000, TATU_CKPT_EVERY=1)
    assert daemon({**env, "MIX_STEPS_LIMIT": "1"}).returncode == 0
    (tmp_path / "run" / "state.old").write_text("not a checkpoint")
    (tmp_path / "run" / "verdict.json").unlink()
    read_end, write_end = socket.socketpair()  # journald's stream is a socket; JOURNAL_STREAM names it
    info = os.fstat(write_end.fileno())
    with write_end:
        proc = subprocess.Popen([sys.executable, "-m", "tatu.daemon"], stdout=write_end, stderr=subprocess.PIPE,
                                env={**clean_environ(), **env, "JOURNAL_STREAM": f"{info.st_dev}:{info.st_ino}"})
    with read_end:
        chunks = []
        while chunk := read_end.recv(65536):
            chunks.append(chunk)
    proc.wait(timeout=120)
    stdout = b"".join(chunks).decode()
    assert proc.returncode == 1, stdout[-2000:]
    lines = stdout.splitlines()
    start = lines.index("<3>Traceback (most recent call last):")
    tail = lines[start:]
    assert any("NotADirectoryError" in line for line in tail)
    assert all(line.startswith("<3>") for line in tail)
    assert b"Traceback" not in proc.stderr.read()  # not a second, unprefixed copy

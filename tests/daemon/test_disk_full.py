"""A full or read-only disk: a save that cannot fit, ENOSPC half-way through a write, a run that
fills its disk (exit 74, the previous state intact), and the disk numbers in the status reply.
Each on a real tmpfs mounted for the test (conftest.py's small_tmpfs: root and mount(8); otherwise `cannot_run`)."""
from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_world import all_finite, clean_environ, daemon, sft_env, wait_for

from tatu.daemon.logs import read_events
from tatu.model.checkpoint import load_checkpoint, save_checkpoint
from tatu.storage import StorageError


def test_a_save_that_cannot_fit_names_the_path_and_free_space_and_keeps_the_old_one(tiny_trunk, small_tmpfs):
    seed = load_checkpoint(tiny_trunk["trunk"])
    saved = dict(model_state=seed.model_state, model_config=seed.model_config, tokenizer=seed.tokenizer)
    size = sum(f.stat().st_size for f in Path(tiny_trunk["trunk"]).iterdir())
    disk = small_tmpfs(f"{int(size * 1.5) // 4096 * 4096 + 8192}")  # one copy fits, two do not
    save_checkpoint(disk / "state", meta={"step": 1}, **saved)
    with pytest.raises(StorageError) as raised:
        save_checkpoint(disk / "state", meta={"step": 2}, **saved)
    message = str(raised.value)
    assert "\n" not in message and str(disk / "state") in message and re.search(r"\d+\.\d MB is free", message)
    assert sorted(p.name for p in disk.iterdir()) == ["state"]  # no temp dir left on the full disk
    assert load_checkpoint(disk / "state").meta == {"step": 1}


def test_enospc_in_the_middle_of_a_save_removes_the_temp_dir(tiny_trunk, small_tmpfs):
    """Room in bytes but not in inodes: the write itself fails with ENOSPC, half-way through."""
    seed = load_checkpoint(tiny_trunk["trunk"])
    saved = dict(model_state=seed.model_state, model_config=seed.model_config, tokenizer=seed.tokenizer)
    disk = small_tmpfs("64m", inodes=12)  # the root, state/ and its 5 files, the temp dir: then no more
    save_checkpoint(disk / "state", meta={"step": 1}, **saved)
    with pytest.raises(StorageError, match=r"No space left on device \(\d+\.\d MB free there\)") as raised:
        save_checkpoint(disk / "state", meta={"step": 2}, **saved)
    assert str(disk / "state") in str(raised.value)
    assert sorted(p.name for p in disk.iterdir()) == ["state"]
    assert load_checkpoint(disk / "state").meta == {"step": 1}


@pytest.mark.slow
def test_disk_full_during_a_run_exits_74_with_the_previous_state_intact(tiny_trunk, tmp_path, small_tmpfs):
    # The sizes of this run's saves, measured on a normal disk first.
    settings = dict(MIX_STEPS_LIMIT=9, EVAL_EVERY=3, TATU_CKPT_EVERY=3, TATU_GEN_PROMPTS=0)
    probe = tmp_path / "probe"
    assert daemon(sft_env(tiny_trunk, probe, MIX_STEPS_LIMIT=1, EVAL_EVERY=1, TATU_CKPT_EVERY=1, TATU_GEN_PROMPTS=0)).returncode == 0
    state_bytes = sum(f.stat().st_size for f in (probe / "run" / "state").iterdir())
    best_bytes = sum(f.stat().st_size for f in (probe / "run" / "best").iterdir())
    # Room for the baseline's best/ and state/ and their logs, not for a second state/ beside the first.
    disk = small_tmpfs(f"{(best_bytes + int(state_bytes * 1.6)) // 4096 * 4096 + 64 * 1024}")
    proc = daemon(sft_env(tiny_trunk, disk, **settings))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 74, out[-3000:]
    assert "Traceback" not in out
    (error,) = [line for line in out.splitlines() if "cannot write checkpoint" in line]
    assert str(disk / "run") in error and re.search(r"\d+\.\d MB is free there", error)
    assert not [p for p in (disk / "run").iterdir() if ".tmp-" in p.name]
    state = load_checkpoint(disk / "run" / "state")
    assert state.extra_json["resume"]["step"] in (0, 3) and not all_finite(state)
    saved_steps = [e["step"] for e in read_events(disk / "run" / "events.jsonl") if e["event"] == "checkpoint"]
    assert state.extra_json["resume"]["step"] == saved_steps[-1]
    # warned before it stopped, and said so in the status numbers doctor reads
    assert "fewer than 3 more saves fit" in out


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir())


def _status_once_saved(tiny_trunk, out: Path, runtime: Path, stop: signal.Signals) -> tuple[dict, dict, str]:
    """A long run writing under `out`: its `status` reply over the run's real socket once the
    baseline's state/ save is logged, the sizes of its best/ and state/ then, and its output
    after `stop` (SIGTERM: a graceful stop that saves again, exit 0; SIGKILL: no more writes)."""
    from tatu.daemon.control.client import request

    env = sft_env(tiny_trunk, out, TATU_RUN="disk", MIX_STEPS_LIMIT=100_000, EVAL_EVERY=1000, TATU_CKPT_EVERY=1000,
                  TATU_GEN_PROMPTS=0)
    runtime.mkdir(mode=0o700)
    log = out.parent / f"{out.name}-daemon.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "tatu.daemon"], env={**clean_environ(), **env, "XDG_RUNTIME_DIR": str(runtime)},
                                stdout=sink, stderr=subprocess.STDOUT, text=True)
    try:
        events_path = out / "disk" / "events.jsonl"
        # best/ is saved before state/ at the baseline: ask once the state's own save is logged
        # (its size is recorded before the checkpoint event is written).
        wait_for(lambda: proc.poll() is not None or (
            events_path.is_file() and any(e["event"] == "checkpoint" for e in read_events(events_path))),
            timeout=120, what="the baseline's checkpoint event")
        assert proc.poll() is None, (proc.returncode, log.read_text()[-3000:])
        reply = request(runtime / "tatu" / "disk.sock", "status")
        assert reply.get("ok"), reply
        # the next save is at step 1000: these are the saves the reply speaks of
        sizes = {name: _dir_bytes(out / "disk" / name) for name in ("best", "state")}
    finally:
        proc.send_signal(stop)
        code = proc.wait(timeout=120)
    output = log.read_text()
    assert code == (0 if stop == signal.SIGTERM else -stop), output[-3000:]
    return reply, sizes, output


@pytest.mark.slow
def test_status_reply_carries_the_disk_numbers_and_says_low_exactly_when_under_3_saves_fit(tiny_trunk, tmp_path, small_tmpfs):
    """`disk_free_mb` / `last_save_mb` / `disk_low` in the status reply, over the run's real socket,
    on a disk with room (False) and on one where fewer than 3 more saves fit (True): the
    documented rule, "fewer than 3 more saves fit" (README, daemon/supervisor.py's warning)."""
    # 1. The test's own disk: plenty of room.
    roomy = tmp_path / "roomy"
    reply, sizes, output = _status_once_saved(tiny_trunk, roomy, tmp_path / "rt-roomy", signal.SIGTERM)
    last = max(sizes.values())  # the largest of the saves so far
    expected_free = shutil.disk_usage(tmp_path).free / 1e6
    assert abs(reply["disk_free_mb"] - expected_free) < 50  # the same disk, a few writes apart
    assert reply["last_save_mb"] == pytest.approx(last / 1e6, rel=0.01, abs=0.002), (reply, sizes)
    assert expected_free > 10 * last / 1e6, "the test's disk itself is nearly full: the 'roomy' case is not"
    assert reply["disk_low"] is False, reply
    assert "more saves fit" not in output
    # 2. A tmpfs with room for the baseline's best/ and state/, then about two more of the
    #    largest: fewer than 3 more saves fit. SIGKILL at the end: a stop save may not fit.
    disk = small_tmpfs(f"{(sizes['best'] + sizes['state'] + 2 * last) // 4096 * 4096 + 64 * 1024}")
    reply, short_sizes, output = _status_once_saved(tiny_trunk, disk, tmp_path / "rt-short", signal.SIGKILL)
    assert short_sizes == pytest.approx(sizes, rel=0.01)  # the same saves (their metadata names other paths)
    assert 0 < reply["disk_free_mb"] < 3 * last / 1e6, (reply, sizes)  # as constructed
    assert reply["last_save_mb"] == pytest.approx(last / 1e6, rel=0.01, abs=0.002), (reply, sizes)
    assert reply["disk_low"] is True, reply
    assert "fewer than 3 more saves fit" in output

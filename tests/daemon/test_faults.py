"""Issue 10: every fault a clean, documented stop (the daemon's part).

Each test reproduces a fault an operator can cause - a full disk, an exploding learning rate,
an empty variable, a hostile request, Ctrl-C, a percent typed as a fraction, a missing
file - on the real thing: a tmpfs mounted for the test, a real env file, a real socket, a
real child process and its signals.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from strict import cannot_run
from tiny_world import base_env, clean_environ

from tatu.daemon.config import ConfigError, load_config
from tatu.daemon.control import MAX_REQUEST_DEPTH, ControlServer
from tatu.daemon.logs import read_events
from tatu.model.checkpoint import NonFiniteTensorError, load_checkpoint, save_checkpoint
from tatu.ops.run_cli import parse_env_file
from tatu.storage import StorageError



def daemon(env: dict[str, str], *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tatu.daemon", *args], env={**clean_environ(), **env},
                          capture_output=True, text=True, timeout=300, **kwargs)


def sft_env(world, out: Path, **extra) -> dict[str, str]:
    settings = dict(TATU_RUN="run", TATU_SEED_CKPT=world["trunk"], SFT_GE=2, REPLAY_N=1, MIX_STEPS_LIMIT=6,
                    EVAL_EVERY=3, TATU_LR="1e-3", TATU_CKPT_EVERY=3)
    settings.update(extra)
    return base_env(world["data"], out, **settings)


@pytest.fixture(scope="module")
def world(tiny_trunk):
    return tiny_trunk


def all_finite(ckpt) -> list[str]:
    """Names of the floating tensors of a loaded checkpoint that hold NaN or inf (none: [])."""
    groups = {"model": ckpt.model_state, **ckpt.extra_tensors}
    return [f"{g}/{k}" for g, ts in groups.items() for k, t in ts.items()
            if t.is_floating_point() and not bool(torch.isfinite(t).all())]


# --- 1. a full disk --------------------------------------------------------------------------

@pytest.fixture
def small_tmpfs(tmp_path):
    """mount_tmpfs(size, inodes=None) -> a real tmpfs of that size under tmp_path, unmounted after."""
    mounted = []

    def mount_tmpfs(size: str, inodes: int | None = None) -> Path:
        point = tmp_path / f"tmpfs{len(mounted)}"
        point.mkdir()
        options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
        if os.geteuid() != 0 or shutil.which("mount") is None:
            cannot_run("a small tmpfs needs root and mount(8)")
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True, text=True)
        if proc.returncode != 0:
            cannot_run(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount_tmpfs
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], check=False)


def tiny_checkpoint(world):
    return load_checkpoint(world["trunk"])


def test_a_save_that_cannot_fit_names_the_path_and_free_space_and_keeps_the_old_one(world, small_tmpfs):
    seed = tiny_checkpoint(world)
    saved = dict(model_state=seed.model_state, model_config=seed.model_config, tokenizer=seed.tokenizer)
    size = sum(f.stat().st_size for f in Path(world["trunk"]).iterdir())
    disk = small_tmpfs(f"{int(size * 1.5) // 4096 * 4096 + 8192}")  # one copy fits, two do not
    save_checkpoint(disk / "state", meta={"step": 1}, **saved)
    with pytest.raises(StorageError) as raised:
        save_checkpoint(disk / "state", meta={"step": 2}, **saved)
    message = str(raised.value)
    assert "\n" not in message and str(disk / "state") in message and re.search(r"\d+\.\d MB is free", message)
    assert sorted(p.name for p in disk.iterdir()) == ["state"]  # no temp dir left on the full disk
    assert load_checkpoint(disk / "state").meta == {"step": 1}


def test_enospc_in_the_middle_of_a_save_removes_the_temp_dir(world, small_tmpfs):
    """Room in bytes but not in inodes: the write itself fails with ENOSPC, half-way through."""
    seed = tiny_checkpoint(world)
    saved = dict(model_state=seed.model_state, model_config=seed.model_config, tokenizer=seed.tokenizer)
    disk = small_tmpfs("64m", inodes=12)  # the root, state/ and its 5 files, the temp dir: then no more
    save_checkpoint(disk / "state", meta={"step": 1}, **saved)
    with pytest.raises(StorageError, match=r"No space left on device \(\d+\.\d MB free there\)") as raised:
        save_checkpoint(disk / "state", meta={"step": 2}, **saved)
    assert str(disk / "state") in str(raised.value)
    assert sorted(p.name for p in disk.iterdir()) == ["state"]
    assert load_checkpoint(disk / "state").meta == {"step": 1}


@pytest.mark.slow
def test_disk_full_during_a_run_exits_74_with_the_previous_state_intact(world, tmp_path, small_tmpfs):
    # The sizes of this run's saves, measured on a normal disk first.
    settings = dict(MIX_STEPS_LIMIT=9, EVAL_EVERY=3, TATU_CKPT_EVERY=3, TATU_GEN_PROMPTS=0)
    probe = tmp_path / "probe"
    assert daemon(sft_env(world, probe, MIX_STEPS_LIMIT=1, EVAL_EVERY=1, TATU_CKPT_EVERY=1, TATU_GEN_PROMPTS=0)).returncode == 0
    state_bytes = sum(f.stat().st_size for f in (probe / "run" / "state").iterdir())
    best_bytes = sum(f.stat().st_size for f in (probe / "run" / "best").iterdir())
    # Room for the baseline's best/ and state/ and their logs, not for a second state/ beside the first.
    disk = small_tmpfs(f"{(best_bytes + int(state_bytes * 1.6)) // 4096 * 4096 + 64 * 1024}")
    proc = daemon(sft_env(world, disk, **settings))
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


@pytest.mark.slow
def test_status_reply_carries_the_disk_numbers(world, tmp_path):
    """`disk_free_mb` / `last_save_mb` in the status reply, over the run's real socket."""
    from tatu.ops.client import request

    env = sft_env(world, tmp_path, TATU_RUN="disk", MIX_STEPS_LIMIT=100_000, EVAL_EVERY=1000, TATU_CKPT_EVERY=1000)
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    proc = subprocess.Popen([sys.executable, "-m", "tatu.daemon"], env={**clean_environ(), **env, "XDG_RUNTIME_DIR": str(runtime)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        sock = runtime / "tatu" / "disk.sock"
        events_path = tmp_path / "disk" / "events.jsonl"
        deadline = time.monotonic() + 120
        # best/ is saved before state/ at the baseline: ask once the state's own save is logged
        # (its size is recorded before the checkpoint event is written).
        while time.monotonic() < deadline and proc.poll() is None:
            if events_path.is_file() and any(e["event"] == "checkpoint" for e in read_events(events_path)):
                break
            time.sleep(0.2)
        reply = request(sock, "status") if sock.exists() else {}
        assert reply.get("ok"), (reply, proc.poll())
        expected_free = shutil.disk_usage(tmp_path).free / 1e6
        assert abs(reply["disk_free_mb"] - expected_free) < 50  # the same disk, a few writes apart
        state_mb = sum(f.stat().st_size for f in (tmp_path / "disk" / "state").iterdir()) / 1e6
        assert reply["last_save_mb"] >= state_mb * 0.99 and reply["disk_low"] in (True, False)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, proc.stderr.read()[-2000:]


# --- 2. a non-finite update ------------------------------------------------------------------

def test_save_refuses_a_non_finite_tensor_and_writes_nothing(world, tmp_path):
    seed = tiny_checkpoint(world)
    state = {k: v.clone() for k, v in seed.model_state.items()}
    next(iter(state.values())).view(-1)[0] = float("nan")
    with pytest.raises(NonFiniteTensorError, match="1 tensors are not finite"):
        save_checkpoint(tmp_path / "ckpt", model_state=state, model_config=seed.model_config, tokenizer=seed.tokenizer)
    assert not list(tmp_path.iterdir())


def test_eval_of_a_broken_model_reports_inf_not_an_exception(world):
    from tatu.evals.scoring import evaluate
    from tatu.evals.sets import load_eval_set

    seed = tiny_checkpoint(world)
    manifest = json.loads((world["data"] / "manifest.json").read_text())
    ruler = load_eval_set(world["data"] / manifest["evals"]["enRuler"]["file"], seed.tokenizer, name="enRuler")
    for poison in ("nan", "huge"):
        model = seed.build_model().eval()
        with torch.no_grad():
            for p in model.parameters():
                if poison == "nan":
                    p.fill_(float("nan"))
                else:  # finite weights whose logits are so far apart that exp(mean NLL) overflows
                    p.mul_(1e4)
        result = evaluate(model, ruler, n_resamples=100)
        assert result.ppl == float("inf") and result.ci.hi == float("inf"), poison


@pytest.mark.parametrize("grad_clip", ["0", "1.0"])
def test_an_inf_gradient_is_never_stepped_on(world, grad_clip):
    """A finite loss with an inf gradient (planted by a hook on one weight's gradient)."""
    from tatu.daemon.trainer import Trainer
    from tatu.data.stream import MixedStream

    config, _ = load_config(sft_env(world, Path("unused"), TATU_GRAD_CLIP=grad_clip))
    seed = tiny_checkpoint(world)
    trainer = Trainer(config, seed.model_config, torch.device("cpu"), seed.model_state, "seed")
    stream = MixedStream(config.data, mix=config.mix, micro_batch=config.micro_batch, seq_len=config.seq_len, seed=config.seed)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    first = next(trainer.model.parameters())
    hook = first.register_hook(lambda grad: grad * float("inf"))
    stats = trainer.step(stream.next_step(), 1)
    hook.remove()
    assert math.isfinite(stats.loss) and not math.isfinite(stats.grad_norm) and not stats.finite
    assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())  # not stepped
    assert not trainer.optimizer.state  # no moment was touched either
    healthy = trainer.step(stream.next_step(), 1)
    assert healthy.finite and math.isfinite(healthy.grad_norm)
    assert not all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


@pytest.mark.slow
def test_a_huge_lr_without_clipping_exits_11_and_the_saved_state_is_finite(world, tmp_path):
    env = sft_env(world, tmp_path, TATU_LR="10", TATU_GRAD_CLIP=0, MIX_STEPS_LIMIT=60, EVAL_EVERY=2,
                  TATU_CKPT_EVERY=1, TATU_GEN_PROMPTS=0, MIX_FORGET_LIMIT=1)
    proc = daemon(env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 11, out[-3000:]
    assert "Traceback" not in out
    intact = re.search(r"the last saved state \(step (\d+)\) is intact", out)
    assert intact, out[-2000:]
    state = load_checkpoint(tmp_path / "run" / "state")
    assert state.extra_json["resume"]["step"] == int(intact.group(1))
    assert all_finite(state) == []
    # a restart resumes from it and stops the same way, cleanly (not a crash to restart)
    again = daemon(env)
    assert again.returncode == 11 and "Traceback" not in again.stdout + again.stderr


# --- 3. the configuration reads only what it is given ---------------------------------------

def test_config_reads_only_the_mapping_it_is_given(monkeypatch, tmp_path):
    monkeypatch.setenv("TATU_OUT", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("TATU_TRUNK_CKPT", str(tmp_path / "trunk"))
    config, origins = load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", "TATU_OUT": ""})
    assert config.out == Path("runs") and origins["TATU_OUT"] == "default"
    assert config.trunk_ckpt is None and origins["TATU_TRUNK_CKPT"] == "default"


def test_empty_values_in_a_real_env_file_mean_unset(tmp_path):
    """What a unit gets from `EnvironmentFile=` lines `TATU_OUT=`: its default, labelled so."""
    env_file = tmp_path / "run.env"
    env_file.write_text(f"TATU_DATA={tmp_path / 'no-data'}\nTATU_SEED_CKPT={tmp_path / 'seed'}\nTATU_OUT=\n"
                        "TATU_TRUNK_CKPT=\nTATU_DEVICE=cpu\n")
    work = tmp_path / "work"
    work.mkdir()
    proc = daemon(parse_env_file(env_file), cwd=work)
    assert proc.returncode == 65, proc.stderr[-2000:]  # the data dir does not exist
    assert re.search(r"TATU_OUT\s+= runs\s+\[default\]", proc.stdout), proc.stdout
    assert re.search(r"TATU_TRUNK_CKPT\s+= None\s+\[default\]", proc.stdout)
    assert re.search(r"TATU_DATA\s+= \S+no-data\s+\[env\]", proc.stdout)
    assert not list(work.iterdir())  # and a rejected start leaves nothing (item 4)


def test_printed_sources_say_where_each_value_came_from(tmp_path):
    env_file = tmp_path / "run.env"
    env_file.write_text(f"TATU_DATA={tmp_path / 'no-data'}\nTATU_SEED_CKPT={tmp_path / 'seed'}\nMIX_STEPS_LIMIT=7\n")
    proc = subprocess.run([sys.executable, "-m", "tatu.ops.cli", "run", "--env-file", str(env_file), "--set", "SFT_GE=3"],
                          env={**clean_environ(), "REPLAY_N": "2", "TATU_OUT": ""}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 65, proc.stderr[-2000:]
    for name, value, source in (("REPLAY_N", "2", "env"), ("MIX_STEPS_LIMIT", "7", "env-file"),
                                ("SFT_GE", "3", "override"), ("EVAL_EVERY", "8", "default"), ("TATU_OUT", "runs", "default")):
        assert re.search(rf"{name}\s+= {value}\s+\[{source}\]", proc.stdout), (name, proc.stdout)


@pytest.mark.slow
def test_smoke_with_an_env_file_uses_what_the_unit_would_get(world, tmp_path, monkeypatch, capsys):
    from tatu.ops.cli import main as tatu

    env = sft_env(world, tmp_path / "runs", MIX_STEPS_LIMIT=4)
    del env["TATU_RUN"]  # named by the instance, as units/runs/example.env says
    env_file = tmp_path / "tiny.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    # The caller's shell: junk the unit never sees.
    monkeypatch.setenv("REPLAY_N", "not-a-number")
    monkeypatch.setenv("TATU_RUN", "someone-else")
    assert tatu(["smoke", "--env-file", str(env_file)]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"TATU_RUN\s+= tiny-smoke\s+\[smoke\]", printed)
    assert re.search(r"REPLAY_N\s+= 1\s+\[env-file\]", printed)
    assert (tmp_path / "runs" / "tiny-smoke" / "final").is_dir()
    assert not (tmp_path / "runs" / "someone-else-smoke").exists()
    # and a TATU_RUN in the file that contradicts the instance fails as the unit would
    env_file.write_text(env_file.read_text() + "TATU_RUN=run5\n")
    assert tatu(["smoke", "--env-file", str(env_file)]) == 78


def test_an_instance_that_contradicts_tatu_run_exits_78_naming_both(tmp_path):
    env = {"TATU_RUN": "run5", "TATU_DATA": str(tmp_path), "TATU_SEED_CKPT": str(tmp_path), "TATU_OUT": str(tmp_path / "out")}
    proc = daemon(env, "--instance", "run7")
    assert proc.returncode == 78
    assert "TATU_RUN=run5" in proc.stderr and "instance run7" in proc.stderr
    assert not (tmp_path / "out").exists()


# --- 4. nothing written before every input is checked ---------------------------------------

@pytest.mark.parametrize("bad", ["TATU_TRUNK_CKPT", "TATU_DATA"])
def test_a_rejected_start_leaves_no_trace(world, tmp_path, bad):
    out = tmp_path / "out"
    proc = daemon(sft_env(world, out, **{bad: str(tmp_path / "nonexistent")}))
    assert proc.returncode == 65, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "nonexistent" in proc.stdout + proc.stderr
    assert not out.exists()


# --- 6. the control socket -------------------------------------------------------------------

def ask(path: Path, payload: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(str(path))
        client.sendall(payload)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = client.recv(65536)
            if not chunk:
                break
            reply += chunk
    return json.loads(reply)


def test_a_deeply_nested_request_gets_an_error_reply_and_the_server_lives(tmp_path):
    path = tmp_path / "s" / "run.sock"
    with ControlServer(path, {"status": lambda _request: {"phase": "training"}}) as server:
        reply = ask(path, b"[" * 30000 + b"\n")  # 30 KB of '[': json.loads would recurse 30,000 deep
        assert reply["ok"] is False and reply["v"] == 1 and "nested" in reply["error"]
        reply = ask(path, b'{"v":1,"cmd":"status","x":' + b"[" * 60 + b"]" * 60 + b"}\n")
        assert reply["ok"] is False and "nested 61 levels" in reply["error"]
        allowed = b"[" * (MAX_REQUEST_DEPTH - 1) + b"]" * (MAX_REQUEST_DEPTH - 1)
        reply = ask(path, b'{"v":1,"cmd":"status","x":' + allowed + b', "s": "[[[[[[[[[[[[[[[[[[[[[[[[[["}\n')
        assert reply["ok"] is True and reply["phase"] == "training"  # brackets inside strings do not count
        assert server.running


def test_any_exception_while_handling_a_request_is_an_error_reply(tmp_path):
    class Weird(dict):  # a reply that blows up while the server merges it into the envelope
        def __iter__(self):
            raise RecursionError("planted")

        def keys(self):
            raise RecursionError("planted")

    path = tmp_path / "s" / "run.sock"
    with ControlServer(path, {"status": lambda _request: Weird(a=1)}) as server:
        reply = ask(path, b'{"v":1,"cmd":"status"}\n')
        assert reply["ok"] is False and "RecursionError" in reply["error"]
        assert server.running


# --- 7. signals --------------------------------------------------------------------------------

def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_ctrl_c_on_a_foreground_run_saves_and_exits_0(world, tmp_path):
    env = sft_env(world, tmp_path, MIX_STEPS_LIMIT=100_000, EVAL_EVERY=1000, TATU_CKPT_EVERY=1000)
    events_file = tmp_path / "run" / "events.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "tatu.ops.cli", "run"], env={**clean_environ(), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def steps():
        return events_file.exists() and [e for e in read_events(events_file) if e["event"] == "step"][2:]

    wait_for(steps, 180, "three steps")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    events = read_events(events_file)
    last_step = [e["step"] for e in events if e["event"] == "step"][-1]
    saved = [e for e in events if e["event"] == "checkpoint"][-1]
    assert saved["reason"] == "stop" and saved["step"] == last_step
    assert load_checkpoint(tmp_path / "run" / "state").extra_json["resume"]["step"] == last_step


def test_a_second_ctrl_c_forces_the_exit():
    """The handler itself (a real signal to this process): the first asks, the second insists."""
    from tatu.daemon import signals

    asked = []
    signals.install()
    try:
        signals.on_stop(lambda: asked.append(True))
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.stop_requested() and asked == [True]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)  # the handler runs at the next bytecode boundary of the main thread
    finally:
        signals.uninstall()
    assert not signals.stop_requested()


def sigterm_caught(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def test_a_sigterm_while_loading_is_a_clean_stop(world, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tatu.daemon"], env={**clean_environ(), **sft_env(world, tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: proc.poll() is not None or sigterm_caught(proc.pid), 60, "the SIGTERM handler", interval=0.002)
    # caught before torch is even loaded: the window where the process used to die outright
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert "libtorch" not in maps
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "stop requested before the baseline eval" in out


# --- 8. implausible limits -----------------------------------------------------------------

@pytest.mark.parametrize("name, value, meant", [("MIX_FORGET_LIMIT", "5", "0.05"), ("TATU_TRUNK_LIMIT", "15", "0.15"),
                                                ("TATU_VERDICT_MIN_GAIN", "2", "0.02"), ("TATU_DROPOUT", "10", "0.1")])
def test_a_percent_typed_as_a_fraction_is_refused(name, value, meant):
    with pytest.raises(ConfigError, match=rf"{name}: .*did you mean {re.escape(meant)}\?"):
        load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", name: value})
    config, _ = load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", name: meant})
    assert getattr(config, {"MIX_FORGET_LIMIT": "mix_forget_limit", "TATU_TRUNK_LIMIT": "trunk_limit",
                            "TATU_VERDICT_MIN_GAIN": "verdict_min_gain", "TATU_DROPOUT": "dropout"}[name]) == float(meant)


def test_mix_forget_limit_5_exits_78_before_anything_runs(tmp_path):
    proc = daemon({"MIX_FORGET_LIMIT": "5", "TATU_DATA": str(tmp_path), "TATU_SEED_CKPT": str(tmp_path),
                   "TATU_OUT": str(tmp_path / "out")})
    assert proc.returncode == 78 and "did you mean 0.05?" in proc.stderr
    assert not (tmp_path / "out").exists()


# --- 10. what systemd and the journal see (the real-systemd half is in test_systemd_integration) --

@pytest.mark.slow
def test_status_text_says_loading_then_each_baseline_set_then_step_0(world, tmp_path):
    """Every STATUS= datagram in order, read from a real NOTIFY_SOCKET."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(tmp_path / "notify.sock"))
    listener.settimeout(0.5)
    messages: list[str] = []
    finished = threading.Event()

    def receive():  # read as systemd does: a full datagram queue would block the sender
        while not finished.is_set():
            try:
                messages.append(listener.recv(4096).decode())
            except TimeoutError:
                continue

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    proc = daemon({**sft_env(world, tmp_path, MIX_STEPS_LIMIT=2, EVAL_EVERY=2), "NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    time.sleep(0.6)
    finished.set()
    reader.join()
    listener.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    flow = [m for m in messages if m.startswith(("STATUS=", "READY=1")) or m == "WATCHDOG=1"]
    texts = [m.removeprefix("STATUS=") for m in flow if m.startswith("STATUS=")]
    assert texts[:4] == ["loading", "baseline eval 1/3 sets", "baseline eval 2/3 sets", "baseline eval 3/3 sets"], texts
    ready = flow.index("READY=1")
    after_ready = flow[ready + 1]
    assert re.fullmatch(r"STATUS=step 0/2 sftHeld \d+\.\d\d drift \+0\.0% first step running", after_ready), flow[ready:]
    assert "step 2/2 eval 2/3 sets" in texts  # the eval at the last step says so too


@pytest.mark.slow
def test_an_uncaught_error_is_logged_with_its_traceback_at_error_priority(world, tmp_path):
    """A bug-class failure (here: `state.old` planted as a file, which no save expects) is a
    crash - exit 1, restarted by systemd - with every traceback line at <3> on journald's stream."""
    env = sft_env(world, tmp_path, MIX_STEPS_LIMIT=6, EVAL_EVERY=1000, TATU_CKPT_EVERY=1)
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

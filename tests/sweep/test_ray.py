"""The Ray backend on a real local Ray cluster (ray.init on this machine: 2 CPUs, no dashboard):

- a 2 x 2 sweep (REPLAY_N x seeds, K=2) through `tatu sweep start --backend ray --address`,
  while one member's Ray worker is SIGKILLed mid-run (Ray retries the lost task) and another
  member's daemon is SIGKILLed (the task fails and Ray retries it): every member ends
  bit-identical (final weights) to the same plan run through the foreground backend, and the
  coordinator's view -- status, report numbers, verdicts -- equals the foreground sweep's;
- `tatu sweep status` from another process sees a member running on the cluster (by its lock);
- without Ray installed, `--backend ray` is one line naming the extra, and nothing is written.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_world import ray_or_skip
from sweep_world import plan_text, plan_world, report_numbers, run_through
from tiny_world import clean_environ

from tatu.sweep.plan.lock import read_lock

# A one-node test cluster on the loopback address: Ray binds to a reachable interface address
# unless told that this is not a cluster; set before ray is imported, inherited by its processes.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

# CPU float sums depend on the thread count, and the backends differ in it: Ray gives a task
# with num_cpus=1 OMP_NUM_THREADS=1, a foreground member gets torch's default (this machine's
# cores). The plan fixes it (TATU_THREADS) for every member, at a count that is neither
# backend's own on a machine with 1 or 2 cores, and both sweeps run in the test's plain
# environment: the plan, not the test, makes the backends agree.
PLAN_THREADS = 3


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_trunk):
    root, plan = plan_world(tmp_path_factory, tiny_trunk, "rayed", steps=6, extra=f", TATU_THREADS = {PLAN_THREADS}")
    return {"root": root, "plan": plan}


def _cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "tatu.ops.cli", "sweep", *argv]


@pytest.fixture(scope="module")
def reference(world):
    sweeps = world["root"] / "foreground"
    out = run_through(world["plan"], sweeps, "4/4 done")
    assert f"threads: TATU_THREADS={PLAN_THREADS} for every member (the plan)" in out
    return sweeps / "rayed"


def _status(sweeps: Path) -> str:
    """`tatu sweep status rayed` in this process: a process that is not the driver, as an operator's."""
    from tatu.ops.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["sweep", "status", "rayed", "--sweeps", str(sweeps)]) == 0
    return out.getvalue()


def _mid_run(sweep_dir: Path, member, reason: str = "scheduled") -> dict | None:
    """The holder of the member's lock once its daemon has saved a state (`reason`), before its verdict."""
    from tatu.sweep.run.ray import lock_holder

    run = Path(member.env["TATU_OUT"]) / member.run
    events = run / "events.jsonl"
    if (run / "verdict.json").exists() or not events.exists() or f'"reason": "{reason}"' not in events.read_text():
        return None
    holder = lock_holder(sweep_dir / "ray" / f"{member.run}.lock")
    return holder if holder and "daemon_pid" in holder else None


@pytest.fixture(scope="module")
def rayed(world, ray_cluster, reference):
    """The plan through the Ray backend; the first member seen mid-run loses its Ray worker, the
    second its daemon, both SIGKILLed."""
    sweeps = world["root"] / "ray"
    sweep_dir = sweeps / "rayed"
    coordinator = subprocess.Popen(_cli("start", str(world["plan"]), "--backend", "ray", "--address", ray_cluster,
                                        "--poll", "0.3", "--sweeps", str(sweeps)),
                                   env=clean_environ(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed: dict[str, str] = {}
    running_status = ""
    deadline = time.monotonic() + 600
    while len(killed) < 2 and coordinator.poll() is None and time.monotonic() < deadline:
        if (sweep_dir / "plan.lock.json").exists():
            for member in read_lock(sweep_dir).members_of():
                holder = _mid_run(sweep_dir, member) if member.name not in killed else None
                if holder is None or len(killed) == 2:
                    continue
                if not killed:
                    running_status = _status(sweeps)
                    if _mid_run(sweep_dir, member) is None:  # it finished while the status ran
                        continue
                    os.kill(holder["worker_pid"], signal.SIGKILL)
                    killed[member.name] = "worker"
                else:
                    os.kill(holder["daemon_pid"], signal.SIGKILL)
                    killed[member.name] = "daemon"
        time.sleep(0.05)
    out, _ = coordinator.communicate(timeout=900)
    return {"sweep_dir": sweep_dir, "rc": coordinator.returncode, "out": out, "killed": killed,
            "running_status": running_status}


def final_weights(sweep_dir: Path) -> dict[str, bytes]:
    return {m.name: (Path(m.env["TATU_OUT"]) / m.run / "final" / "model.safetensors").read_bytes()
            for m in read_lock(sweep_dir).members_of()}


def threads_used(sweep_dir: Path) -> dict[str, int]:
    """The thread count each member's final checkpoint says its daemon computed with."""
    from tatu.model.checkpoint import load_checkpoint

    return {m.name: load_checkpoint(Path(m.env["TATU_OUT"]) / m.run / "final").meta["threads"]
            for m in read_lock(sweep_dir).members_of()}


def verdicts(sweep_dir: Path) -> dict[str, str]:
    return {m.name: json.loads((Path(m.env["TATU_OUT"]) / m.run / "verdict.json").read_text())["verdict"]
            for m in read_lock(sweep_dir).members_of()}


@pytest.mark.slow
def test_a_ray_sweep_with_killed_workers_equals_the_foreground_sweep(rayed, reference):
    assert rayed["rc"] == 0, rayed["out"]
    assert "sweep finished: 4/4 done" in rayed["out"], rayed["out"]
    assert sorted(rayed["killed"].values()) == ["daemon", "worker"], (rayed["killed"], rayed["out"])
    sweep_dir = rayed["sweep_dir"]
    by_name = {m.name: m for m in read_lock(sweep_dir).members_of()}
    for name in rayed["killed"]:
        # Each killed member ran twice (two attempts in its log) and its second daemon resumed.
        log = (sweep_dir / "logs" / f"{name}.out").read_text()
        assert log.count("tatu ray: ") == 2, log
        events = Path(by_name[name].env["TATU_OUT"]) / by_name[name].run / "events.jsonl"
        assert '"event": "resumed"' in events.read_text()
    assert set(threads_used(sweep_dir).values()) == set(threads_used(reference).values()) == {PLAN_THREADS}
    ref, got = final_weights(reference), final_weights(sweep_dir)
    assert len(ref) == 4 and ref.keys() == got.keys()
    assert [n for n in ref if ref[n] != got[n]] == []
    assert verdicts(sweep_dir) == verdicts(reference)
    assert report_numbers(sweep_dir) == report_numbers(reference)


@pytest.mark.slow
def test_status_sees_ray_members_like_any_backend(world, rayed, reference):
    # Mid-run, from a process that is not the driver: the killed worker's member ran on this node.
    first = next(name for name, how in rayed["killed"].items() if how == "worker")
    line = next(line for line in rayed["running_status"].splitlines()
                if line.strip().startswith(f"rayed.{first} "))  # status names a member by its folder
    assert " running " in line and "daemon pid" in line, rayed["running_status"]
    # Finished: the same table as the foreground sweep's, but for the backend's name.
    ray_status = _status(world["root"] / "ray").splitlines()
    fg_status = _status(world["root"] / "foreground").splitlines()
    assert ray_status[0] == "sweep rayed (ray, K=2): 4/4 done, 0 running"
    assert ray_status[1:] == fg_status[1:] and len(ray_status) == 5


def test_without_ray_the_backend_is_one_line_naming_the_extra(tmp_path):
    # Ray is installed in this venv (make test installs it), so its absence is made: None in
    # sys.modules makes `import ray` raise ImportError as for a missing package.
    plan = tmp_path / "p.toml"
    plan.write_text(plan_text("noray", tmp_path / "data", tmp_path / "trunk"))
    sweeps = tmp_path / "sweeps"
    code = ("import sys; sys.modules['ray'] = None; from tatu.ops.cli import main; "
            f"sys.exit(main(['sweep', 'start', {str(plan)!r}, '--backend', 'ray', '--sweeps', {str(sweeps)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], env=clean_environ(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 78, proc.stderr
    assert proc.stderr.strip().splitlines() == ["tatu sweep: --backend ray needs Ray, which is not installed here: "
                                                "pip install 'tatu[ray]'"]
    assert not sweeps.exists()


def _sigterm_pending(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    pending = int(next(line.split()[1] for line in status.splitlines() if line.startswith("ShdPnd:")), 16)
    return bool(pending & (1 << (signal.SIGTERM - 1)))


@pytest.mark.slow
def test_sweep_stop_cancels_ray_tasks_whose_daemons_save_and_start_continues(world, ray_cluster, reference):
    # One member of the same plan: `tatu sweep stop` mid-run -> the coordinator cancels the task,
    # the daemon gets SIGTERM and saves ("stop"); `start` again resumes it to the reference's weights.
    # The daemon is held with SIGSTOP from its baseline until the SIGTERM is pending, so a tiny run
    # cannot finish before the stop reaches it, however fast or loaded the machine.
    plan = world["root"] / "one" / "rayed.toml"
    plan.parent.mkdir()
    plan.write_text(world["plan"].read_text().replace("seeds = [1, 2]", "seeds = [1]").replace("REPLAY_N = [0, 2]", "REPLAY_N = [0]"))
    sweeps = world["root"] / "stopped"
    start = _cli("start", str(plan), "--backend", "ray", "--address", ray_cluster, "--poll", "0.3", "--sweeps", str(sweeps))
    coordinator = subprocess.Popen(start, env=clean_environ(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sweep_dir = sweeps / "rayed"
    held = None
    deadline = time.monotonic() + 300
    while held is None and coordinator.poll() is None and time.monotonic() < deadline:
        if (sweep_dir / "plan.lock.json").exists():
            held = _mid_run(sweep_dir, read_lock(sweep_dir).members_of()[0], reason="baseline")
        time.sleep(0.02)
    assert held is not None, "the member never reached its baseline state"
    os.kill(held["daemon_pid"], signal.SIGSTOP)
    try:
        stop = subprocess.run(_cli("stop", "rayed", "--sweeps", str(sweeps)), env=clean_environ(),
                              capture_output=True, text=True, timeout=120)
        assert stop.returncode == 0, stop.stderr
        deadline = time.monotonic() + 120
        while not _sigterm_pending(held["daemon_pid"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _sigterm_pending(held["daemon_pid"]), "the cancelled task never sent its daemon SIGTERM"
    finally:
        os.kill(held["daemon_pid"], signal.SIGCONT)
    out, _ = coordinator.communicate(timeout=300)
    assert coordinator.returncode == 0, out
    (member,) = read_lock(sweep_dir).members_of()
    run = Path(member.env["TATU_OUT"]) / member.run
    assert not (run / "verdict.json").exists(), out  # stopped before the end, not finished
    assert '"reason": "stop"' in (run / "events.jsonl").read_text()
    assert "coordinator stopping" in out
    again = subprocess.run(start, env=clean_environ(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "continuing a stopped sweep" in again.stdout and "sweep finished: 1/1 done" in again.stdout
    assert (run / "final" / "model.safetensors").read_bytes() == final_weights(reference)[member.name]


def test_a_wrong_address_is_one_line_and_78_at_once(world, tmp_path):
    """ray.init alone would retry a dead address for minutes; nothing is written either."""
    ray_or_skip()
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sweeps = tmp_path / "sweeps"
    for argv, shown in ((["--address", f"127.0.0.1:{port}"], f"--address 127.0.0.1:{port}"),
                        (["--address", "ray://127.0.0.1"], "--address ray://127.0.0.1: not HOST:PORT")):
        started = time.monotonic()
        proc = subprocess.run(_cli("start", str(world["plan"]), "--backend", "ray", *argv, "--sweeps", str(sweeps)),
                              env=clean_environ(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 78, proc.stdout + proc.stderr
        assert shown in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert time.monotonic() - started < 60  # seconds, not ray.init's minutes of retries
    env = {**clean_environ(), "RAY_ADDRESS": f"127.0.0.1:{port}"}
    proc = subprocess.run(_cli("start", str(world["plan"]), "--backend", "ray", "--sweeps", str(sweeps)),
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 78 and f"RAY_ADDRESS=127.0.0.1:{port}: no Ray cluster answers" in proc.stderr, proc.stderr
    assert not sweeps.exists()


@pytest.mark.parametrize("resources, device, options, given, k", [
    ({"CPU": 32, "GPU": 4}, "auto", {"num_cpus": 1, "num_gpus": 1}, "cuda", 4),
    ({"CPU": 32, "GPU": 4}, "cuda:3", {"num_cpus": 1, "num_gpus": 1}, "cuda", 4),  # Ray's GPU is cuda:0 in the task
    ({"CPU": 32, "GPU": 4}, "cpu", {"num_cpus": 2, "num_gpus": 0}, None, 16),
    ({"CPU": 2}, "auto", {"num_cpus": 2, "num_gpus": 0}, "cpu", 1),
    ({"CPU": 2}, "cpu", {"num_cpus": 2, "num_gpus": 0}, None, 1),
])
def test_member_resources_follow_the_cluster(monkeypatch, resources, device, options, given, k):
    # A GPU cluster cannot exist on this machine: only Ray's resource table is stood in for.
    from tatu.sweep.run import ray as sweep_ray
    from tatu.sweep.plan.member import Member

    monkeypatch.setattr(sweep_ray, "cluster_resources", lambda: resources)
    member = Member("replay-n0-s1", "x.replay-n0-s1", "compare", "replay-n0", {}, 1, {"TATU_DEVICE": device})
    assert sweep_ray.task_options(member, 2) == (options, given)
    assert sweep_ray.slots(device, 2) == k


def test_a_cuda_member_on_a_cluster_without_gpus_is_a_config_error(monkeypatch):
    from tatu.exitcodes import BAD_CONFIG
    from tatu.sweep.run import ray as sweep_ray
    from tatu.sweep.errors import SweepError
    from tatu.sweep.plan.member import Member

    monkeypatch.setattr(sweep_ray, "cluster_resources", lambda: {"CPU": 8})
    member = Member("replay-n0-s1", "x.replay-n0-s1", "compare", "replay-n0", {}, 1, {"TATU_DEVICE": "cuda:1"})
    with pytest.raises(SweepError) as error:
        sweep_ray.task_options(member, 1)
    assert error.value.code == BAD_CONFIG and "TATU_DEVICE=cuda:1, but the Ray cluster has no GPU" in error.value.message

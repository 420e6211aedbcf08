"""The Ray backend of a sweep: each member is a Ray task that runs the daemon in the foreground.

    tatu sweep start PLAN --backend ray [--address ADDR]

The coordinator runs in the terminal and is the Ray driver: it submits one task per member
(1 GPU, or --ray-cpus CPUs on a cluster without GPUs) and Ray places it on some node, where it
runs `python -m tatu.daemon` with the member's env and returns the daemon's exit code. The
run dirs (TATU_OUT, inside the sweep dir) and the sweep dir itself must be on storage every node
mounts at the same path: a task retried on another node resumes from the state/ an earlier
attempt saved, exactly, as the daemon always does.

Who handles what:
- a worker or its node is lost: Ray retries the task (max_retries); the daemon, the worker's
  child, gets SIGTERM when the worker dies (PR_SET_PDEATHSIG) and saves if its node still lives;
- the daemon crashes (an exit other than 0 10 11 65 78): the task raises MemberCrashed and Ray
  retries it (retry_exceptions): CRASH_RESTARTS retries in all, like the unit's Restart=on-failure;
- a stop (tatu sweep stop, ^C, a fatal member): ray.cancel raises KeyboardInterrupt in the
  task, which sends the daemon SIGTERM: it saves and exits 0.

One daemon per run: the task holds an flock on sweeps/NAME/ray/<run>.lock and hands the
descriptor to its daemon, so the lock lasts until both are gone. A retry on the same node waits
for a predecessor still saving, and any process that sees the sweep dir (`tatu sweep status`, a
restarted coordinator) tells a running member by the held lock, since it cannot reach the
control socket on a remote node.
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tatu import exitcodes
from tatu.daemon.run.paths import SweepDir
from tatu.sweep.run.backends import (_NOT_INHERITED, CRASH_RESTARTS, RUN_PREFIXES, UnitState, _last_error_line,
                                     member_env, write_private)
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.member import Member
from tatu.envfile import env_file_text

EXTRA_MISSING = "--backend ray needs Ray, which is not installed here: pip install 'tatu[ray]'"
# A member's result, as for the units: what a restart cannot fix. 75 (another daemon on the run dir:
# a predecessor task still saving) is the one Ray retries, as the foreground backend waits it out.
RESULT_CODES = tuple(c for c in (exitcodes.OK, *exitcodes.NOT_RESTARTED) if c != exitcodes.RUN_DIR_BUSY)
PROBE_SECONDS = 5.0  # a head that does not accept a TCP connection in this long is not there
LOCK_WAIT_SECONDS = 600  # a predecessor saving a big model on a slow disk; then the attempt fails and Ray retries
# Loaded once in the worker: the child between fork and exec must not dlopen (another thread may hold its lock).
_LIBC = ctypes.CDLL(None, use_errno=True)


def _ray():
    try:
        import ray
    except ImportError:
        raise SweepError(exitcodes.BAD_CONFIG, EXTRA_MISSING) from None
    return ray


def connect(address: str | None) -> None:
    """Join the cluster at `address` ("auto": the one `ray start` runs on this node; none: RAY_ADDRESS,
    else a running local one, else a new local one with this machine's CPUs and GPUs)."""
    ray = _ray()
    if ray.is_initialized():
        return
    if address:
        probe(address, "--address")
    elif os.environ.get("RAY_ADDRESS"):
        probe(os.environ["RAY_ADDRESS"], "RAY_ADDRESS=")
    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    except ConnectionError as exc:
        raise SweepError(1, f"cannot reach the Ray cluster at {address or os.environ.get('RAY_ADDRESS') or 'auto'}: {exc}")


def probe(address: str, given_as: str) -> None:
    """ray.init retries a wrong HOST:PORT for minutes: a TCP connect tells at once whether anything
    listens there. "auto" and "local" are Ray's own to resolve."""
    if address in ("auto", "local"):
        return
    shown = f"{given_as}{address}" if given_as.endswith("=") else f"{given_as} {address}"
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise SweepError(exitcodes.BAD_CONFIG, f"{shown}: not HOST:PORT (the head's address, e.g. HEAD:6379), "
                                             f"ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_SECONDS).close()
    except OSError as exc:
        raise SweepError(exitcodes.BAD_CONFIG, f"{shown}: no Ray cluster answers there ({exc.strerror or exc}); "
                                             f"start one with `ray start --head` on that machine, or fix the address") from None


def cluster_resources() -> dict:
    return _ray().cluster_resources()


def slots(base_device: str, cpus_per_member: int) -> int:
    """How many members the cluster runs at once: its GPUs for GPU members, else its CPUs / --ray-cpus."""
    resources = cluster_resources()
    gpus = int(resources.get("GPU", 0))
    if gpus and base_device not in ("cpu", "mps"):
        return gpus
    return max(1, int(resources.get("CPU", 1)) // cpus_per_member)


def task_options(member: Member, cpus_per_member: int) -> tuple[dict, str | None]:
    """(Ray resources, TATU_DEVICE for the member or None to keep its own)."""
    device = member.env.get("TATU_DEVICE", "auto")
    if device in ("cpu", "mps"):
        return {"num_cpus": cpus_per_member, "num_gpus": 0}, None
    if int(cluster_resources().get("GPU", 0)):
        # Ray sets CUDA_VISIBLE_DEVICES to the GPU it gave the task, so that GPU is cuda (cuda:0).
        return {"num_cpus": 1, "num_gpus": 1}, "cuda"
    if device != "auto":
        raise SweepError(exitcodes.BAD_CONFIG, f"{member.name}: TATU_DEVICE={device}, but the Ray cluster has no GPU")
    # auto on a cluster without GPUs: say cpu, so a CPU task never takes a GPU Ray did not give it.
    return {"num_cpus": cpus_per_member, "num_gpus": 0}, "cpu"


class MemberCrashed(Exception):
    """The daemon exited with a crash code: Ray retries the task (the daemon resumes from its state/)."""

    def __init__(self, code: int, run: str):
        super().__init__(code, run)
        self.code = code
        self.run = run

    def __str__(self) -> str:
        return f"{self.run}: the daemon exited {self.code}"


# --- the task, on a worker ----------------------------------------------------------------------

def _die_with_worker() -> None:
    _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: a killed worker's daemon saves and exits


def _interruptible() -> None:
    """ray.cancel interrupts a task by simulating SIGINT in its worker (_thread.interrupt_main),
    which does nothing while SIGINT is ignored, and a cluster started from a script's background job
    (`ray start ... &` without job control) hands its workers SIGINT ignored: then a stop would never
    reach the daemon. The task's own thread takes SIGINT back as KeyboardInterrupt."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _take_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(path, "a+")
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                raise MemberCrashed(75, path.stem) from None  # EX_TEMPFAIL: still held; Ray tries again
            time.sleep(0.5)


def _write_holder(lock, holder: dict) -> None:
    lock.seek(0)
    lock.truncate()
    lock.write(json.dumps(holder) + "\n")
    lock.flush()


def run_member(env: dict, cwd: str, log_path: str, lock_path: str, env_file: str) -> int:
    """One attempt at one member: the daemon in the foreground; its exit code, or MemberCrashed."""
    run = env["TATU_RUN"]
    _interruptible()
    lock = _take_lock(Path(lock_path))
    child = None
    try:
        daemon_env = {k: v for k, v in os.environ.items() if not k.startswith(RUN_PREFIXES) and k not in _NOT_INHERITED}
        daemon_env.update(env, PYTHONUNBUFFERED="1")
        holder = {"node": socket.gethostname(), "worker_pid": os.getpid(), "since": time.time()}
        with open(log_path, "ab") as log:
            log.write(f"tatu ray: {run} on {holder['node']} (ray worker pid {os.getpid()})\n".encode())
            log.flush()
            child = subprocess.Popen([sys.executable, "-m", "tatu.daemon", "--env-file", env_file], env=daemon_env, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=cwd if os.path.isdir(cwd) else None, pass_fds=(lock.fileno(),),
                                     preexec_fn=_die_with_worker)
        _write_holder(lock, {**holder, "daemon_pid": child.pid})
        # Polled, not child.wait(): ray.cancel's KeyboardInterrupt is only raised between bytecodes.
        while child.poll() is None:
            time.sleep(0.2)
    finally:
        if child is not None and child.poll() is None:  # cancelled (or an error here): the daemon saves, then we go
            child.send_signal(signal.SIGTERM)
            child.wait()
        lock.close()
    code = child.returncode
    code = 128 - code if code < 0 else code
    if code not in RESULT_CODES:
        raise MemberCrashed(code, run)
    return code


# --- the backend, in the coordinator ---------------------------------------------------------------

def lock_holder(path: Path) -> dict | None:
    """What the lock file says while a task holds it; None when nobody holds it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return json.loads(f.read() or "{}")
            except json.JSONDecodeError:  # the holder is between truncate and write
                return {}
        fcntl.flock(f, fcntl.LOCK_UN)
        return None


def _holder_text(holder: dict) -> str:
    if not holder:
        return "starting"
    return f"on {holder.get('node')}, daemon pid {holder.get('daemon_pid', '?')}"


class RayBackend:
    name = "ray"

    def __init__(self, sweep_dir: Path, cpus_per_member: int = 1):
        if cpus_per_member < 1:
            raise SweepError(exitcodes.USAGE, f"--ray-cpus {cpus_per_member}: at least 1 CPU per member")
        self.sweep_dir = Path(sweep_dir)
        self.cpus_per_member = cpus_per_member
        self.tasks: dict = {}  # run -> the ObjectRef of its task, for the tasks this coordinator started

    def env_path(self, member: Member) -> Path:
        return SweepDir(self.sweep_dir).env_file(member.run)

    def lock_path(self, member: Member) -> Path:
        return self.sweep_dir / "ray" / f"{member.run}.lock"

    def log_path(self, member: Member) -> Path:
        return self.sweep_dir / "logs" / f"{member.name}.out"

    def start(self, member: Member, device: str | None) -> None:
        ray = _ray()
        options, task_device = task_options(member, self.cpus_per_member)
        env = member_env(member, device or task_device)
        write_private(self.env_path(member), env_file_text(env))
        self.log_path(member).parent.mkdir(parents=True, exist_ok=True)
        task = ray.remote(run_member).options(name=f"tatu-{member.run}", max_retries=CRASH_RESTARTS,
                                              retry_exceptions=[MemberCrashed], **options)
        self.tasks[member.run] = task.remote(env, os.getcwd(), str(self.log_path(member)), str(self.lock_path(member)),
                                                  str(self.env_path(member)))

    def poll(self, member: Member) -> UnitState:
        ref = self.tasks.get(member.run)
        if ref is None:
            holder = lock_holder(self.lock_path(member))
            if holder is not None:  # a task of an earlier coordinator (Ray ends those; this one may be saving)
                return UnitState("running", detail=f"started by an earlier coordinator, {_holder_text(holder)}")
            return UnitState("absent")
        ray = _ray()
        ready, _ = ray.wait([ref], timeout=0)
        if not ready:
            holder = lock_holder(self.lock_path(member))
            return UnitState("running", detail=_holder_text(holder) if holder is not None else "waiting for Ray to place it")
        del self.tasks[member.run]
        try:
            return UnitState("exited", int(ray.get(ref)))
        except ray.exceptions.TaskCancelledError:
            return UnitState("absent", detail="stopped")
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, MemberCrashed):
                return UnitState("exited", exc.cause.code, detail=f"Ray tried it {CRASH_RESTARTS + 1} times")
            return UnitState("exited", 1, detail=f"the Ray task failed: {exc.cause!r}")
        except ray.exceptions.RayError as exc:  # its worker or node lost more often than max_retries
            return UnitState("exited", 1, detail=f"lost {CRASH_RESTARTS + 1} times ({type(exc).__name__})")

    def stop(self, member: Member) -> None:
        ref = self.tasks.get(member.run)
        if ref is not None:
            _ray().cancel(ref)  # KeyboardInterrupt in the task: the daemon gets SIGTERM, saves, exits 0
        # A task of another coordinator (this is `tatu sweep stop`): that coordinator reads stop.json
        # and cancels its own tasks; Ray ends them in any case when their driver exits.

    def last_error(self, member: Member) -> str:
        return _last_error_line(self.log_path(member))

    def log_of(self, member: Member) -> str:
        return str(self.log_path(member))

    def wait_all(self, timeout: float = 600) -> None:
        refs = list(self.tasks.values())
        if refs:
            _ray().wait(refs, num_returns=len(refs), timeout=timeout)

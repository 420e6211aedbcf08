import os
import signal
import tempfile

import pytest
from hypothesis import settings

from tatu.model import cpu_sums

# Before any test's first matmul, as `tatu` and the daemon do in their own processes: in-process
# runs and scores then sum as theirs do (MKL reads the variable once).
cpu_sums.request()

# CI (CI=true) draws the same examples on every run, so a red CI is reproducible and never a
# dice roll; a developer's run keeps exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True, scope="session")
def private_runtime_dir():
    """The session gets its own XDG_RUNTIME_DIR, so the control sockets of the tests' runs
    never meet a real daemon's (or another test session's) socket of the same run name."""
    saved = {k: os.environ.get(k) for k in ("XDG_RUNTIME_DIR", "RUNTIME_DIRECTORY", "NOTIFY_SOCKET", "JOURNAL_STREAM")}
    with tempfile.TemporaryDirectory(prefix="tatu-xdg-") as runtime:
        os.chmod(runtime, 0o700)
        os.environ["XDG_RUNTIME_DIR"] = runtime
        for key in ("RUNTIME_DIRECTORY", "NOTIFY_SOCKET", "JOURNAL_STREAM"):
            os.environ.pop(key, None)
        yield runtime
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def tiny_trunk(tmp_path_factory):
    """The tiny world's data dir and a trunk trained on it (24 steps), built once per session
    for every test that needs a seed (daemon, DDP, sweep and systemd tests alike; write runs
    elsewhere, e.g. tiny_world.sft_env(tiny_trunk, tmp_path)): {"root", "data", "trunk"},
    data and trunk absolute."""
    from tiny_world import base_env, build_world

    from tatu.daemon.main import main as daemon_main

    root = tmp_path_factory.mktemp("world")
    data = build_world(root)
    trunk_env = base_env(data, root / "runs", TATU_RUN="trunk", TATU_MODE="pretrain", SFT_GE=2,
                         MIX_STEPS_LIMIT=24, EVAL_EVERY=12, TATU_LR="3e-3", TATU_GEN_PROMPTS=0)
    assert daemon_main(trunk_env) == 0
    return {"root": root, "data": data.absolute(), "trunk": (root / "runs" / "trunk" / "final").absolute()}


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster (2 CPUs, no dashboard) for the session, its address: one `ray.init` per
    process, shared by every module that runs Ray (tests/ray_world.py)."""
    from ray_world import ray_or_skip

    ray = ray_or_skip()
    # Started as from a script's background job (`ray start ... &` without job control), whose
    # processes all inherit SIGINT ignored: a sweep's stop must reach its tasks even so (sweep/run/ray.py).
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 2**20, logging_level="WARNING",
                 log_to_driver=False)
    finally:
        signal.signal(signal.SIGINT, handler)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture
def without_tensorboard(tmp_path):
    """Variables for a child process in which `import tensorboard` fails as if it were not installed
    (a package of that name first on PYTHONPATH that raises ImportError)."""
    shadow = tmp_path / "no-tensorboard" / "tensorboard"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("no tensorboard in this test")\n')
    return {"PYTHONPATH": str(shadow.parent)}

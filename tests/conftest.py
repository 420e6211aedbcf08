import fcntl
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

try:  # the dev extra's pytest-xdist: `make test` runs the suite on several workers
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # one process: nothing to group
    LoadScopeScheduling = None

from tatu.model import cpu_sums

# Before any test's first matmul, as `tatu` and the daemon do in their own processes: in-process
# runs and scores then sum as theirs do (MKL reads the variable once).
cpu_sums.request()

# The suite runs more torch threads than cores (make test's workers, each with its daemons and
# ranks): OpenMP threads waiting for work sleep instead of spinning on a core another process
# needs. How threads wait, not how many or how they sum: the numbers are the same. Measured on
# this 2-core Xeon under load (a test running one daemon): half the CPU time and half the wall
# time. Set before torch loads here, inherited by every process the tests start; a value in the
# environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# CI (CI=true) draws the same examples on every run, so a red CI is reproducible and never a
# dice roll; a developer's run keeps exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


# -- pytest-xdist: `make test` runs the suite on several workers -------------------------------
#
# A test's group is its unit of work, run on one worker in file order. A module is a group of its
# own: its module fixtures (a sweep world, a DDP launch its tests share) are built once, and its
# tests keep their order (test_sft_unit.py's one unit life builds on the test before). A module
# with any test that needs something the machine has only one of joins that thing's group, whose
# modules one worker runs one after another:
# - "systemd" (the systemd marker): systemd_harness.py's real `systemd --user`. Two at once would
#   share the /run/systemd/system marker and the journald the harness starts, and the first to
#   finish would remove both under the other.
# - "ray" (the ray_cluster fixture): the local Ray cluster, 2 CPUs' worth of tasks whose timing
#   the tests follow; one per run, as one per process already is.
# Everything else a test touches is its own or made per worker: temp dirs, the control sockets'
# XDG_RUNTIME_DIR (private_runtime_dir, per worker process), torchrun's rendezvous (a one-node
# launch binds a free port, torch >= 2.4; the two-node test asks the kernel for one), the
# harness's cgroups (named by PID). The slowest set-ups are built once for the run (built_once).
#
# Only a worker collects, and xdist's own groups (--dist loadgroup) are lost on pytest 9 (xdist 3.8
# renames the node id through an attribute pytest 9 no longer reads): so each worker writes the
# groups to a file the controller made, and the controller's scheduler, xdist's scheduling by
# scope, reads its scopes there.
SHARED_GROUPS: dict[str, Callable[[pytest.Item], bool]] = {
    "systemd": lambda item: item.get_closest_marker("systemd") is not None,
    "ray": lambda item: "ray_cluster" in item.fixturenames,
}
GROUPS_FILE = "tatu_groups_file"  # the key of the workers' input naming the file


def xdist_worker() -> str | None:
    """This process's xdist worker id ("gw0", ...), None outside xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER")


def group_tests(items: list[pytest.Item]) -> dict[str, str]:
    """{node id: its group}; items reordered, the groups with the most tests marked slow first and
    the shared ones before all (a chain no second worker can shorten), so that no long group starts
    last while the other workers run out of work. Within a group, collection order."""
    group_of_module: dict[str, str] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        group_of_module.setdefault(module, module)
        group_of_module[module] = next((name for name, needs in SHARED_GROUPS.items() if needs(item)),
                                       group_of_module[module])
    members: dict[str, list[pytest.Item]] = {}
    for item in items:
        members.setdefault(group_of_module[item.nodeid.split("::", 1)[0]], []).append(item)

    def weight(group: str) -> tuple[bool, int]:
        return group in SHARED_GROUPS, sum(item.get_closest_marker("slow") is not None for item in members[group])

    items[:] = [item for group in sorted(members, key=weight, reverse=True) for item in members[group]]
    return {item.nodeid: group for group, grouped in members.items() for item in grouped}


if LoadScopeScheduling is not None:
    class GroupScheduling(LoadScopeScheduling):
        """xdist's scheduling by scope (a scope at a time to a worker, in collection order), a
        scope being a group of group_tests, as the workers wrote them to `path`."""

        def __init__(self, config: pytest.Config, log, path: Path) -> None:
            super().__init__(config, log)
            self.path = path
            self.group_of: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.group_of is None:  # first asked once every worker has collected
                self.group_of = json.loads(self.path.read_text())
            return self.group_of[nodeid]


class ControllerGroups:
    """The controller's side: the file's place, handed to each worker, and the scheduler that reads it."""

    def __init__(self) -> None:
        self.directory = tempfile.TemporaryDirectory(prefix="tatu-groups-")
        self.path = Path(self.directory.name) / "groups.json"

    def pytest_configure_node(self, node) -> None:
        node.workerinput[GROUPS_FILE] = str(self.path)

    def pytest_xdist_make_scheduler(self, config, log):
        config.option.loadscopereorder = False  # group_tests' order, not xdist's by test count
        return GroupScheduling(config, log, self.path)

    def pytest_unconfigure(self) -> None:
        self.directory.cleanup()


def pytest_configure(config):
    if LoadScopeScheduling is not None and config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ControllerGroups(), "tatu-xdist-groups")


def pytest_collection_modifyitems(config, items):
    path = getattr(config, "workerinput", {}).get(GROUPS_FILE)
    if path is None:
        return
    groups = group_tests(items)
    written = Path(f"{path}.{xdist_worker()}")  # every worker writes the same groups; one file, whole
    written.write_text(json.dumps(groups))
    os.replace(written, path)


@pytest.fixture(scope="session")
def built_once(tmp_path_factory) -> Callable[[str, Callable[[Path], None]], Path]:
    """built_once(name, build) -> a directory `name` that build(directory) filled, once for the
    run, for the slowest set-ups many tests read (write elsewhere: tmp_path). Alone, in a fresh temp
    dir, as any session fixture. Under xdist, in the run's dir that every worker shares (the parent
    of their own temp dirs): the first worker to ask builds it holding a lock, the others wait on
    the lock and read it. A failed (or skipped) build leaves no "built" mark: the next worker to ask
    tries again, and fails (or skips) with a report of its own."""
    def once(name: str, build: Callable[[Path], None]) -> Path:
        if xdist_worker() is None:
            root = tmp_path_factory.mktemp(name)
            build(root)
            return root
        shared = tmp_path_factory.getbasetemp().parent
        root, built = shared / name, shared / f"{name}.built"
        with open(shared / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes, also when build raises
            if not built.exists():
                shutil.rmtree(root, ignore_errors=True)  # what another worker's failed build left
                root.mkdir()
                build(root)
                built.touch()
        return root

    return once


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
def tiny_trunk(built_once):
    """The tiny world's data dir and a trunk trained on it (24 steps), built once per session
    for every test that needs a seed (daemon, DDP, sweep and systemd tests alike; write runs
    elsewhere, e.g. tiny_world.sft_env(tiny_trunk, tmp_path)): {"root", "data", "trunk"},
    data and trunk absolute."""
    from tiny_world import base_env, build_world

    from tatu.daemon.main import main as daemon_main

    def build(root: Path) -> None:
        data = build_world(root)
        trunk_env = base_env(data, root / "runs", TATU_RUN="trunk", TATU_MODE="pretrain", SFT_GE=2,
                             MIX_STEPS_LIMIT=24, EVAL_EVERY=12, TATU_LR="3e-3", TATU_GEN_PROMPTS=0)
        assert daemon_main(trunk_env) == 0

    root = built_once("world", build)  # one trunk for every xdist worker too
    return {"root": root, "data": (root / "data").absolute(), "trunk": (root / "runs" / "trunk" / "final").absolute()}


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

import os
import tempfile

import pytest


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
def daemon_world(tmp_path_factory, private_runtime_dir):
    """A tiny data dir and a trunk trained on it (24 steps), shared by the daemon tests."""
    from tiny_world import base_env, build_world

    from tatu.daemon.main import main as daemon_main

    root = tmp_path_factory.mktemp("world")
    data = build_world(root)
    trunk_env = base_env(data, root / "runs", TATU_RUN="trunk", TATU_MODE="pretrain", SFT_GE=2,
                         MIX_STEPS_LIMIT=24, EVAL_EVERY=12, TATU_LR="3e-3", TATU_GEN_PROMPTS=0)
    assert daemon_main(trunk_env) == 0
    return {"root": root, "data": data, "trunk": root / "runs" / "trunk" / "final"}

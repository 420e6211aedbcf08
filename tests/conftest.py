import os

import pytest


@pytest.fixture(autouse=True)
def private_runtime_dir(tmp_path_factory, monkeypatch):
    """Each test gets its own XDG_RUNTIME_DIR, so control sockets of runs that share a
    name (every test run is called "run") never meet, also across parallel sessions."""
    runtime = tmp_path_factory.mktemp("xdg-runtime")
    os.chmod(runtime, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    return runtime

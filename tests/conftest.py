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

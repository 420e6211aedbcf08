"""CI_STRICT=1 (.ci/run sets it): a check that cannot run on this machine fails instead of
skipping. A test-only switch: it is outside the run variables' prefixes and the product never
reads it."""
from __future__ import annotations

import os

import pytest

STRICT = os.environ.get("CI_STRICT") == "1"


def cannot_run(reason: str):
    """Skip with `reason`, or fail under CI_STRICT=1."""
    if STRICT:
        pytest.fail(f"{reason} (CI_STRICT=1 makes this a failure)")
    pytest.skip(reason)

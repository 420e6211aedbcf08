"""The tiny demo, run once per session: its pipeline test and its kernel-change test share it."""
from __future__ import annotations

import pytest

from demo_world import DemoRun, run_tiny_demo


@pytest.fixture(scope="session")
def tiny_demo(tmp_path_factory) -> DemoRun:
    """The tiny demo under this machine's own kernels (whatever ATEN_CPU_CAPABILITY and MKL_CBWR
    the environment holds: none, on CI)."""
    return run_tiny_demo(tmp_path_factory.mktemp("demo") / "demo")

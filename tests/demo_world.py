"""The tiny demo (`python -m tatu.ops.demo --scale tiny`) as the tests run it."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from strict import cannot_run
from tiny_world import clean_environ


@dataclass(frozen=True)
class DemoRun:
    out: Path
    stdout: str


def demo_packages_problem() -> str | None:
    from tatu.data.demo.sources import DemoPackagesError
    from tatu.ops.packages import ensure_demo_packages

    try:
        ensure_demo_packages()
    except DemoPackagesError as exc:
        return str(exc)
    return None


def run_tiny_demo(out: Path, extra_env: dict[str, str] | None = None) -> DemoRun:
    """`python -m tatu.ops.demo --scale tiny --foreground` into `out`, checked to exit 0."""
    problem = demo_packages_problem()
    if problem:
        cannot_run(f"demo packages unavailable: {problem}")
    proc = subprocess.run([sys.executable, "-m", "tatu.ops.demo", "--scale", "tiny", "--foreground", "--out", str(out)],
                          env={**clean_environ(), **(extra_env or {})}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return DemoRun(out, proc.stdout)

"""The demo's Debian packages (tatu.data.demo.DEMO_PACKAGES), installed with apt-get when missing.

Only as root: anyone else gets the command to run. The data module reads what is installed;
installing software on the machine is an operator's action and lives here.
"""
from __future__ import annotations

import os
import subprocess

from tatu.data.demo import DemoPackagesError, installed_versions, missing_demo_packages

_apt_updated = False


def ensure_demo_packages() -> dict[str, str]:
    """Install missing DEMO_PACKAGES with apt-get when root; return {package: version}.

    Not root and something missing: DemoPackagesError naming the packages and the command.
    """
    global _apt_updated
    missing = missing_demo_packages()
    if missing and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        if not _apt_updated:
            _run_apt(["apt-get", "update", "-q"], env)
            _apt_updated = True
        _run_apt(["apt-get", "install", "-y", "-q", *missing], env)
        still_missing = missing_demo_packages()
        if still_missing:
            raise DemoPackagesError(f"apt-get did not install: {', '.join(still_missing)}")
    return installed_versions()


def _run_apt(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise DemoPackagesError(
            f"`{' '.join(argv)}` failed ({done.returncode}): {' | '.join(tail)}")

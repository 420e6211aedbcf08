"""Debian packages on this machine, as dpkg-query reports them (installing them is
tatu.ops.packages'; the demo and the tagger only read what is there)."""
from __future__ import annotations

import shutil
import subprocess


def dpkg_available() -> bool:
    return shutil.which("dpkg-query") is not None


def installed_version(package: str) -> str | None:
    """The installed version of `package`; None when it is not installed or there is no dpkg."""
    if not dpkg_available():
        return None
    done = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Version}", package],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not done.stdout.startswith("ii"):
        return None
    return done.stdout.split()[-1]

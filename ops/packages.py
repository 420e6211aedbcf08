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
    missing = missing_demo_packages()
    if missing and os.geteuid() == 0:
        _apt_install(missing)
        still_missing = missing_demo_packages()
        if still_missing:
            raise DemoPackagesError(f"apt-get did not install: {', '.join(still_missing)}")
    return installed_versions()


def ensure_tagger_packages() -> str | None:
    """Install Apertium's taggers (tatu.data.tags.TAGGER_PACKAGES) with apt-get when root and
    missing; returns None when they are there, else one line saying how to install them."""
    from tatu.data.tags import TAGGER_PACKAGES, tagger_versions

    missing = [p for p, version in tagger_versions().items() if version is None]
    if not missing:
        return None
    command = f"apt-get install -y {' '.join(TAGGER_PACKAGES)}"
    if os.geteuid() != 0:
        return f"Apertium's taggers are not installed ({', '.join(missing)}): run `sudo {command}`"
    try:
        _apt_install(missing)
    except DemoPackagesError as exc:
        return f"{exc}; install them with `{command}`"
    still = [p for p, version in tagger_versions().items() if version is None]
    return f"apt-get did not install {', '.join(still)}" if still else None


def main(argv: list[str] | None = None) -> int:
    """`python -m tatu.ops.packages tagger` (what `make test` runs): install the taggers, or say
    how; exit 0 either way (the tests that need them skip with that reason, fail under CI_STRICT)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if args != ["tagger"]:
        print("usage: python -m tatu.ops.packages tagger", file=sys.stderr)
        return 2
    problem = ensure_tagger_packages()
    print(problem or "Apertium taggers installed", file=sys.stderr if problem else sys.stdout)
    return 0


def _apt_install(packages: list[str]) -> None:
    """apt-get install `packages` (the package lists updated once per process)."""
    global _apt_updated
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not _apt_updated:
        _run_apt(["apt-get", "update", "-q"], env)
        _apt_updated = True
    _run_apt(["apt-get", "install", "-y", "-q", *packages], env)


def _run_apt(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise DemoPackagesError(
            f"`{' '.join(argv)}` failed ({done.returncode}): {' | '.join(tail)}")


if __name__ == "__main__":
    raise SystemExit(main())

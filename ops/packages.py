"""The Debian packages tatu needs, installed with apt-get when missing: the demo's text
(tatu.data.demo.sources.DEMO_PACKAGES), Apertium's taggers and the page tests' browser.

Only as root: anyone else gets the command to run. The data module reads what is installed;
installing software on the machine is an operator's action and lives here.
"""
from __future__ import annotations

import os
import subprocess

from tatu.data.demo.sources import DemoPackagesError, installed_versions, missing_demo_packages
from tatu.debian import installed_version

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


# Debian's headless browser, which the page tests drive (tests/pages/): the run report and the
# sweep page opened as a reader opens them. Test-only: the product never starts a browser.
BROWSER_PACKAGES: tuple[str, ...] = ("chromium",)


def ensure_tagger_packages() -> str | None:
    """Install Apertium's taggers (tatu.data.tags.TAGGER_PACKAGES) with apt-get when root and
    missing; returns None when they are there, else one line saying how to install them."""
    from tatu.data.tags import TAGGER_PACKAGES

    return _ensure(TAGGER_PACKAGES, "Apertium's taggers")


def ensure_browser_packages() -> str | None:
    """Install Chromium (BROWSER_PACKAGES) the same way; None when it is there, else how to get it."""
    return _ensure(BROWSER_PACKAGES, "Chromium (the page tests' browser)")


def _ensure(packages: tuple[str, ...], what: str) -> str | None:
    missing = [p for p in packages if installed_version(p) is None]
    if not missing:
        return None
    command = f"apt-get install -y {' '.join(packages)}"
    if os.geteuid() != 0:
        return f"{what} not installed ({', '.join(missing)}): run `sudo {command}`"
    try:
        _apt_install(missing)
    except DemoPackagesError as exc:
        return f"{exc}; install {what} with `{command}`"
    still = [p for p in packages if installed_version(p) is None]
    return f"apt-get did not install {', '.join(still)}" if still else None


TARGETS = {"tagger": (ensure_tagger_packages, "Apertium taggers installed"),
           "browser": (ensure_browser_packages, "Chromium installed")}


def main(argv: list[str] | None = None) -> int:
    """`python -m tatu.ops.packages tagger|browser` (what `make test` runs): install them, or say
    how; exit 0 either way (the tests that need them skip with that reason, fail under CI_STRICT)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in TARGETS:
        print(f"usage: python -m tatu.ops.packages {'|'.join(TARGETS)}", file=sys.stderr)
        return 2
    ensure, done = TARGETS[args[0]]
    problem = ensure()
    print(problem or done, file=sys.stderr if problem else sys.stdout)
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

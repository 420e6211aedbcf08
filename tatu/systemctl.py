"""The user manager as tatu meets it: the one way it calls `systemctl --user` and reads
`systemctl show` (units install, doctor, the demo, the sweep's systemd backend), and where the
manager reads units and env files from."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


class SystemctlError(RuntimeError):
    """systemctl is not installed, or a command it ran failed."""


def systemctl_user(*args: str, timeout: float | None = 60.0, check: bool = True, capture: bool = True) -> str:
    """`systemctl --user ARGS`'s stdout; with check, a non-zero exit is a SystemctlError naming
    the command and systemctl's own message. capture=False leaves its output on the terminal."""
    binary = shutil.which("systemctl")
    if binary is None:
        raise SystemctlError("tatu: systemctl not found; install the units on a machine with systemd")
    proc = subprocess.run([binary, "--user", *args], capture_output=capture, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise SystemctlError(f"tatu: systemctl --user {' '.join(args)} failed ({proc.returncode}): "
                             f"{(proc.stderr or '').strip() or (proc.stdout or '').strip()}")
    return proc.stdout or ""


def parse_show(text: str) -> dict[str, str]:
    """`systemctl --user show UNIT` output -> {property: value} (values may contain '=')."""
    show = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"systemctl show output line {number} has no '=': {line!r}")
        show[key] = value
    return show


def show(unit: str, *properties: str, timeout: float = 60.0) -> dict[str, str]:
    """The unit's properties (all of them when none are named)."""
    return parse_show(systemctl_user("show", unit, *[f"-p{p}" for p in properties], timeout=timeout))


def config_home(environ=None) -> Path:
    """%E of a user manager: $XDG_CONFIG_HOME, else ~/.config."""
    env = os.environ if environ is None else environ
    return Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"


def unit_env_dir(environ=None) -> Path:
    """%E/tatu: where tatu's units read their <instance>.env."""
    return config_home(environ) / "tatu"

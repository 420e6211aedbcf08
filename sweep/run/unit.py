"""The sweep coordinator's systemd unit (units/tatu-sweep@.service): its env file, and starting it,
optionally waiting for it to end (`tatu sweep start --wait`)."""
from __future__ import annotations

import sys
from pathlib import Path

from tatu import exitcodes
from tatu.sweep.errors import SweepError
from tatu.sweep.run.printed import sweep_command

COORDINATOR_UNIT = "tatu-sweep@{}.service"


def sweep_env_path(name: str) -> Path:
    from tatu.systemctl import unit_env_dir

    return unit_env_dir() / "sweeps" / f"{name}.env"


def start_unit(name: str, sweep_dir: Path, k: int, wait: bool = False) -> int:
    from tatu.sweep.run.backends import write_private
    from tatu.systemctl import SystemctlError, systemctl_user

    unit = COORDINATOR_UNIT.format(name)
    try:
        loaded = systemctl_user("show", unit, "-pLoadState", "--value").strip()
        if loaded != "loaded":
            raise SweepError(exitcodes.BAD_CONFIG, f"{unit} is not installed ({loaded}): run `tatu units install` first")
        write_private(sweep_env_path(name), f"SWEEP_DIR={sweep_dir}\n")
        try:
            systemctl_user("enable", unit)  # a reboot starts it again (with lingering enabled)
        except SystemctlError as exc:
            print(f"note: {exc} (the sweep runs, but will not restart after a reboot)", file=sys.stderr)
        if wait:
            print(f"starting {unit} (K={k}) and waiting for it to end: `{sweep_command('status', sweep_dir)}`, "
                  f"`journalctl --user -u {unit} -f`", flush=True)
            systemctl_user("start", "--wait", unit, timeout=None, check=False, capture=False)
            status = systemctl_user("show", unit, "-pExecMainStatus", "--value", timeout=None, check=False)
            systemctl_user("reset-failed", unit, check=False)  # a failed coordinator would stay listed
            return int(status.strip() or 1)
        systemctl_user("start", unit)
    except SystemctlError as exc:
        raise SweepError(1, str(exc))
    print(f"started {unit} (K={k}): `{sweep_command('status', sweep_dir)}`, `journalctl --user -u {unit} -f`")
    return 0

"""`tatu doctor [RUN]`: what protects the run from the OOM killers, and what only looks like it
does. This module gathers the live facts (the unit's `systemctl show`, /proc, the host) and
prints; what they mean is ops/doctor/checks.py's, tested on recorded outputs."""
from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import psutil

from tatu.daemon.run.paths import RunDir
from tatu.envfile import EnvFileError, parse_env_file
from tatu.exitcodes import USAGE, TatuExit
from tatu import systemctl
from tatu.ops.doctor.checks import CAP_SYS_RESOURCE, Finding, diagnose, format_findings, int_or_none, unreachable_manager

# -- live facts ----------------------------------------------------------------------

def unit_for_run(run: str) -> str:
    """The dedicated unit if installed (tatu-sft-run5), else the template instance."""
    dedicated = systemctl.show(f"tatu-sft-{run}.service", timeout=30)
    return dedicated["Id"] if dedicated.get("LoadState") == "loaded" else f"tatu-sft@{run}.service"


def _cgroup_dir(control_group: str) -> Path | None:
    for mount in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        candidate = mount / control_group.lstrip("/")
        if control_group and (mount / "cgroup.controllers").exists() and candidate.is_dir():
            return candidate
    return None


def _cuda_facts() -> dict | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return {"name": torch.cuda.get_device_name(0), "free_mb": free / 2**20, "total_mb": total / 2**20}


def host_facts(check_gpu: bool = True) -> dict:
    """What doctor can know without the user manager: swap, systemd-oomd, linger, GPU."""
    user = pwd.getpwuid(os.getuid()).pw_name
    swap = psutil.swap_memory()
    proc: dict = {"user": user, "swap_total_mb": swap.total / 2**20, "swap_used_mb": swap.used / 2**20,
                  "oomd_running": any(p.info["name"] == "systemd-oomd" for p in psutil.process_iter(["name"]))}
    proc["linger"] = _linger(user)
    if check_gpu:
        proc["cuda"] = _cuda_facts()
    return proc


def parse_proc_status(text: str) -> dict:
    """/proc/PID/status -> effective uid, CapEff and whether it holds CAP_SYS_RESOURCE."""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    cap_eff = int(fields["CapEff"].strip(), 16)
    return {"uid": int(fields["Uid"].split()[1]), "cap_eff": cap_eff,
            "cap_sys_resource": bool(cap_eff >> CAP_SYS_RESOURCE & 1)}


def proc_status(pid: int | str) -> dict | None:
    try:
        return parse_proc_status(Path(f"/proc/{pid}/status").read_text())
    except (OSError, KeyError, ValueError, IndexError):
        return None


def _directory_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def disk_facts(run_dir: Path) -> dict:
    """Free space where the run writes, and the size of its last saved state (state/)."""
    existing = run_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        free = shutil.disk_usage(existing).free
        state = RunDir(run_dir).state
        state_size = _directory_size(state) if state.is_dir() else None
    except OSError as exc:
        return {"run_dir": str(run_dir), "error": f"{run_dir}: {exc.strerror or exc}"}
    return {"run_dir": str(run_dir), "free_mb": free / 2**20,
            "state_mb": None if state_size is None else state_size / 2**20}


def run_dir_of(run: str, show: dict) -> Path:
    """Where the unit's daemon writes: WorkingDirectory / TATU_OUT / the run (the instance name)."""
    from tatu.daemon.config import RunConfig

    environment = dict(item.partition("=")[::2] for item in show.get("Environment", "").split() if "=" in item)
    for entry in [show.get("EnvironmentFiles", "")]:
        path = entry.rsplit(" (", 1)[0].strip()
        if path:
            try:
                environment.update(parse_env_file(Path(path)))  # EnvironmentFile= wins over Environment=
            except EnvFileError:
                pass
    out = Path(environment.get("TATU_OUT") or RunConfig.model_fields["out"].default)
    workdir = Path(show.get("WorkingDirectory", "").lstrip("!-") or Path.home())
    return (out if out.is_absolute() else workdir / out) / run


def gather(run: str, check_gpu: bool = True) -> tuple[dict, dict]:
    """(systemctl show of the run's unit, live facts) for diagnose()."""
    show = systemctl.show(unit_for_run(run), timeout=30)
    proc = host_facts(check_gpu)
    proc["self"] = proc_status("self")
    pid = int_or_none(show.get("MainPID")) or 0
    if pid:
        try:
            proc["oom_score_adj"] = int(Path(f"/proc/{pid}/oom_score_adj").read_text())
            manager_pid = psutil.Process(pid).ppid()
        except (OSError, psutil.Error):
            manager_pid = 0
        manager = proc_status(manager_pid) if manager_pid else None
        if manager is not None:
            proc["manager"] = {"pid": manager_pid, **manager}
    if show.get("LoadState") == "loaded":
        proc["disk"] = disk_facts(run_dir_of(run, show))
    cgroup = _cgroup_dir(show.get("ControlGroup", ""))
    if cgroup is not None:
        proc["cgroup_path"] = str(cgroup)
        proc["cgroup_uid"] = cgroup.stat().st_uid
        swap_max = cgroup / "memory.swap.max"
        if swap_max.exists():
            proc["cgroup_swap_max"] = swap_max.read_text().strip()
    return show, proc


def _linger(user: str) -> bool | None:
    if shutil.which("loginctl"):
        out = subprocess.run(["loginctl", "show-user", user, "-p", "Linger", "--value"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip() in ("yes", "no"):
            return out.stdout.strip() == "yes"
    marker_dir = Path("/var/lib/systemd/linger")
    return (marker_dir / user).exists() if marker_dir.is_dir() else None


def units_finding() -> Finding:
    """Whether the installed units are the ones this checkout installs: a `git pull` that changed a
    template (or what it runs) leaves the installed copy running the old text."""
    from tatu.ops.units import UnitsError, installed_workdir, outdated_units

    if installed_workdir() is None:
        return Finding("WARN", "units", "tatu-sft@.service is not installed for this user", "tatu units install")
    try:
        outdated = outdated_units()
    except (UnitsError, OSError) as exc:
        return Finding("WARN", "units", f"cannot compare the installed units with this checkout's ({exc})")
    if outdated:
        return Finding("WARN", "units", f"installed {', '.join(outdated)} older than this checkout's (differs from what "
                                        "`tatu units install` writes now)", "tatu units install")
    return Finding("OK", "units", "the installed units are this checkout's")


def add_doctor_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("run", nargs="?", default=None, help="run name (default: the only installed run)")
    parser.add_argument("--json", action="store_true", help="findings as JSON")
    parser.add_argument("--no-gpu", action="store_true", help="skip the CUDA check (it imports torch)")
    return parser


def _only_installed_run() -> str:
    runs = sorted(p.stem for p in systemctl.unit_env_dir().glob("*.env"))
    if len(runs) != 1:
        raise RuntimeError(f"tatu: name the run (installed: {', '.join(runs) or 'none'})")
    return runs[0]


def doctor_main(args: argparse.Namespace) -> int:
    try:
        run = args.run or _only_installed_run()
    except RuntimeError as exc:
        raise TatuExit(USAGE, str(exc).removeprefix("tatu: "))
    try:
        show, proc = gather(run, check_gpu=not args.no_gpu)
        findings = diagnose(show, proc)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        # No user manager to ask: say so, and still report what the host itself tells.
        findings = unreachable_manager(str(exc), host_facts(check_gpu=not args.no_gpu))
    findings.append(units_finding())
    if args.json:
        print(json.dumps([asdict(f) for f in findings], indent=2))
    else:
        print(format_findings(findings))
    return 1 if any(f.level == "FAIL" for f in findings) else 0

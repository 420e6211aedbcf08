"""What `tatu doctor` concludes: pure functions of the unit's properties (`systemctl show`) and
the live process facts, so recorded outputs (tests/fixtures/doctor/) test every conclusion.

Facts behind the checks (docs/operations.md, "systemd facts that shape the units"):
- Lowering oom_score_adj needs CAP_SYS_RESOURCE in the manager that starts the unit: a user
  manager lacks it, and so does a root manager in a container. OOMScoreAdjust=-600 is then
  dropped silently, so the process's effective value is read back and compared, and the
  manager's uid and CapEff (/proc/PID/status) name which of the two it is.
- A save writes the new state beside the old one before the rename: the run directory's
  filesystem needs at least the size of the last saved state free.
- systemd-oomd honours ManagedOOMPreference=avoid on its swap rule only for root-owned
  cgroups; for a user's cgroup only on the memory-pressure rule.
- MemorySwapMax=0 keeps the unit out of the swap rule altogether: that rule picks the
  cgroup using the most swap, and this one uses none.
"""
from __future__ import annotations

from dataclasses import dataclass

CAP_SYS_RESOURCE = 24  # linux/capability.h: the capability that lowers oom_score_adj
# oomd's default SwapUsedLimit is 90%; warn well before it.
SWAP_BUSY_FRACTION = 0.5


@dataclass(frozen=True)
class Finding:
    level: str   # "OK" | "WARN" | "FAIL"
    check: str
    why: str
    fix: str = ""


def int_or_none(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def diagnose(show: dict, proc: dict) -> list[Finding]:
    """Findings from the unit's properties (`show`) and the live process facts (`proc`, see gather)."""
    unit = show.get("Id", "the unit")
    if show.get("LoadState") not in (None, "loaded"):
        return [Finding("FAIL", "unit", f"{unit} is {show.get('LoadState')}",
                        "tatu units install --run RUN, then systemctl --user daemon-reload")]
    findings = []
    running = show.get("ActiveState") == "active" and int_or_none(show.get("MainPID")) not in (None, 0)
    if not running:
        findings.append(Finding("WARN", "unit", f"{unit} is {show.get('ActiveState', '?')}: live checks use no process",
                                f"systemctl --user start {unit}"))
    findings.append(_check_oom_score(show, proc, running))
    findings.append(_check_oomd_preference(show, proc))
    findings.append(_check_swap_max(show, proc))
    findings.append(_check_swap_use(proc))
    findings.append(_check_linger(proc))
    findings.append(_check_gpu(proc))
    if "disk" in proc:
        findings.append(check_disk(proc["disk"]))
    return findings


def unreachable_manager(error: str, proc: dict) -> list[Finding]:
    """Findings when `systemctl --user` cannot reach a manager: the host checks only."""
    first = error.strip().splitlines()[0] if error.strip() else "no answer"
    return [
        Finding("FAIL", "user manager", f"systemctl --user cannot reach it ({first})",
                "run in your login session (XDG_RUNTIME_DIR set), or `loginctl enable-linger $USER` for runs without one"),
        _check_swap_use(proc),
        _check_linger(proc),
        _check_gpu(proc),
    ]


def _check_oom_score(show, proc, running) -> Finding:
    wanted = int_or_none(show.get("OOMScoreAdjust")) or 0
    effective = proc.get("oom_score_adj")
    if wanted >= 0:
        return Finding("WARN", "oom_score_adj", f"the unit sets no negative OOMScoreAdjust ({wanted})",
                       "OOMScoreAdjust=-600 in the unit (tatu's units set it)")
    if not running or effective is None:
        return Finding("WARN", "oom_score_adj", f"unit asks {wanted}; no running process to read it back from",
                       "run tatu doctor while the run is active")
    if effective <= wanted:
        return Finding("OK", "oom_score_adj", f"effective {effective} (unit asks {wanted})")
    cause, fix = _oom_cause(proc.get("manager"), proc.get("self"))
    return Finding("FAIL", "oom_score_adj", f"unit asks OOMScoreAdjust={wanted} but the process has {effective}: {cause}",
                   fix)


_USER_MANAGER_FIX = ("keep MemorySwapMax=0 (the oomd swap rule), or run it as a system unit with User=, "
                     "or give user@UID.service a root drop-in with OOMScoreAdjust=-600 (its children inherit it)")


def _oom_cause(manager: dict | None, me: dict | None) -> tuple[str, str]:
    """(why the score was not lowered, what to do), from what can be seen of the manager."""
    if manager is not None:
        who = f"its manager (pid {manager['pid']}) runs as " + ("root" if manager["uid"] == 0 else f"uid {manager['uid']}")
        if manager["cap_sys_resource"]:
            return (f"{who} with CAP_SYS_RESOURCE, so it could lower it; something raised it after the start",
                    "look for a drop-in or ExecStartPre that writes oom_score_adj (systemctl --user cat UNIT)")
        if manager["uid"] == 0:
            return (f"{who} but without CAP_SYS_RESOURCE (CapEff {manager['cap_eff']:x}), as in a container: "
                    "root alone cannot lower it, and the setting is dropped silently",
                    "give the container CAP_SYS_RESOURCE (docker run --cap-add SYS_RESOURCE), or run on a host "
                    "whose manager has it; meanwhile MemorySwapMax=0 keeps oomd's swap rule away")
        return f"{who} without CAP_SYS_RESOURCE: a user manager cannot lower it and drops the setting silently", \
            _USER_MANAGER_FIX
    seen = ""
    if me is not None:
        seen = (f" (this shell: {'root' if me['uid'] == 0 else 'uid ' + str(me['uid'])}, "
                f"{'with' if me['cap_sys_resource'] else 'without'} CAP_SYS_RESOURCE)")
    return ("its manager could not be read; a manager without CAP_SYS_RESOURCE (a user manager, or root in a "
            f"container) cannot lower it and drops the setting silently{seen}", _USER_MANAGER_FIX)


def check_disk(disk: dict) -> Finding:
    if disk.get("error"):
        return Finding("WARN", "disk", f"free space not checked: {disk['error']}")
    run_dir, free = disk["run_dir"], disk["free_mb"]
    text = f"{free:,.0f} MB free for {run_dir}"
    state = disk.get("state_mb")
    if state is None:
        return Finding("OK", "disk", text + " (no saved state yet)")
    text += f"; the last saved state is {state:,.1f} MB"
    if free < state:
        return Finding("WARN", "disk", text + ": the next save writes a new one beside it and may not fit",
                       "free space on that filesystem, or move the run (TATU_OUT) to a larger one")
    return Finding("OK", "disk", text)


def _check_oomd_preference(show, proc) -> Finding:
    preference = show.get("ManagedOOMPreference", "none")
    owner = proc.get("cgroup_uid")
    if not proc.get("oomd_running", True):
        return Finding("OK", "ManagedOOMPreference", f"{preference}; systemd-oomd is not running here")
    if preference not in ("avoid", "omit"):
        return Finding("WARN", "ManagedOOMPreference", f"{preference}: systemd-oomd may pick this unit first",
                       "ManagedOOMPreference=avoid in the unit")
    if owner == 0:
        return Finding("OK", "ManagedOOMPreference", f"{preference}, root-owned cgroup: honoured by both oomd rules")
    who = "user-owned" if owner is not None else "cgroup owner unknown, assumed user-owned"
    return Finding("WARN", "ManagedOOMPreference",
                   f"{preference} ({who} cgroup): oomd honours it on memory pressure but ignores it on its swap rule",
                   "MemorySwapMax=0 keeps the unit out of the swap rule; or a system unit with User=")


def _check_swap_max(show, proc) -> Finding:
    value = show.get("MemorySwapMax", "infinity")
    swap_busy = _swap_fraction(proc) >= SWAP_BUSY_FRACTION
    if value == "0":
        applied = proc.get("cgroup_swap_max")
        if applied is not None and applied != "0":
            return Finding("FAIL", "MemorySwapMax", f"unit sets 0 but the cgroup's memory.swap.max is {applied}",
                           "delegate the memory controller to the user manager (Delegate= on user@.service)")
        if applied is None and proc.get("cgroup_path"):
            return Finding("WARN", "MemorySwapMax", "unit sets 0 but no memory.swap.max in its cgroup: "
                           "the memory controller is not delegated (or cgroup v1), so it has no effect",
                           "a system unit with User=, or enable memory delegation for user@.service")
        return Finding("OK", "MemorySwapMax", "0: the unit cannot swap, so oomd's swap rule never picks it")
    level = "FAIL" if swap_busy and proc.get("oomd_running", True) else "WARN"
    return Finding(level, "MemorySwapMax", f"{value}: under swap pressure oomd's swap rule may kill this unit"
                   + (" and swap is busy now" if swap_busy else ""),
                   "MemorySwapMax=0 in the unit (tatu units install writes it)")


def _swap_fraction(proc) -> float:
    total, used = proc.get("swap_total_mb") or 0, proc.get("swap_used_mb") or 0
    return used / total if total else 0.0


def _check_swap_use(proc) -> Finding:
    total = proc.get("swap_total_mb")
    if total is None:
        return Finding("WARN", "swap", "swap use unknown")
    if total == 0:
        return Finding("OK", "swap", "no swap configured: oomd's swap rule cannot fire")
    fraction = _swap_fraction(proc)
    text = f"{proc.get('swap_used_mb', 0):.0f} of {total:.0f} MB in use ({fraction:.0%})"
    if fraction >= SWAP_BUSY_FRACTION:
        return Finding("WARN", "swap", text + ": oomd's swap rule acts at 90% by default",
                       "free memory before the run, or MemorySwapMax=0 for the unit")
    return Finding("OK", "swap", text)


def _check_linger(proc) -> Finding:
    linger, user = proc.get("linger"), proc.get("user", "$USER")
    if linger:
        return Finding("OK", "linger", f"enabled for {user}: the run survives logout")
    if linger is None:
        return Finding("WARN", "linger", "unknown", f"loginctl show-user {user} -p Linger")
    return Finding("WARN", "linger", f"off for {user}: the user manager, and the run, stop at logout",
                   f"loginctl enable-linger {user}")


def _check_gpu(proc) -> Finding:
    cuda = proc.get("cuda")
    if not cuda:
        return Finding("OK", "gpu", "no CUDA device visible (CPU run)")
    free, total = cuda.get("free_mb", 0), cuda.get("total_mb", 0)
    text = f"{cuda.get('name', 'cuda:0')}: {free:.0f} of {total:.0f} MB free"
    if total and free / total < 0.1:
        return Finding("WARN", "gpu", text + ": another process holds the memory", "nvidia-smi to see who")
    return Finding("OK", "gpu", text)


def format_findings(findings: list[Finding]) -> str:
    lines = []
    for finding in findings:
        lines.append(f"{finding.level:<4} {finding.check}: {finding.why}")
        if finding.fix and finding.level != "OK":
            lines.append(f"     fix: {finding.fix}")
    return "\n".join(lines)

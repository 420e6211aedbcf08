"""tatu doctor on recorded `systemctl show` outputs (tests/fixtures/doctor/, recorded fixtures: see README there)."""
import argparse
from pathlib import Path

import pytest

from tatu.ops.doctor import cli as doctor
from tatu.ops.doctor.cli import add_doctor_args, doctor_main
from tatu.ops.doctor.checks import Finding, check_disk, diagnose, format_findings
from tatu.systemctl import parse_show

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "doctor"


def show(name):
    return parse_show((DATA / name).read_text())


def by_check(findings):
    result = {}
    for f in findings:
        result.setdefault(f.check, f)
    return result


# What a user unit on the operator's machine looks like: score not lowered, user-owned
# cgroup, swap half used, no linger.
USER_FACTS = {"oom_score_adj": 0, "cgroup_uid": 1000, "cgroup_path": "/sys/fs/cgroup/user.slice/x",
              "cgroup_swap_max": "0", "swap_total_mb": 8192, "swap_used_mb": 5000, "oomd_running": True,
              "linger": False, "user": "op", "cuda": {"name": "RTX 3060", "free_mb": 9000, "total_mb": 12288}}


def test_parse_show_keeps_values_with_equals_and_rejects_garbage():
    parsed = show("run5-user-inactive.show")
    assert parsed["OOMScoreAdjust"] == "-600"
    assert parsed["ManagedOOMPreference"] == "avoid"
    assert parsed["MemorySwapMax"] == "0"
    assert parsed["LoadState"] == "loaded"
    assert parse_show("Environment=A=1 B=2\n") == {"Environment": "A=1 B=2"}
    with pytest.raises(ValueError, match="line 2 has no '='"):
        parse_show("A=1\nnonsense\n")


def test_user_unit_with_ignored_oom_score_fails_and_says_why_and_how():
    findings = by_check(diagnose(show("run5-user-active.show"), USER_FACTS))
    oom = findings["oom_score_adj"]
    assert oom.level == "FAIL"
    assert "OOMScoreAdjust=-600 but the process has 0" in oom.why
    assert "MemorySwapMax=0" in oom.fix and "User=" in oom.fix and "drop-in" in oom.fix
    pref = findings["ManagedOOMPreference"]
    assert pref.level == "WARN" and "ignores it on its swap rule" in pref.why
    assert findings["MemorySwapMax"].level == "OK"
    assert findings["swap"].level == "WARN"  # 61% used
    assert findings["linger"].level == "WARN" and findings["linger"].fix == "loginctl enable-linger op"
    assert findings["gpu"].level == "OK" and "9000 of 12288 MB free" in findings["gpu"].why
    assert "unit" not in findings  # it is running


def test_system_unit_with_user_is_all_ok():
    facts = dict(USER_FACTS, oom_score_adj=-600, cgroup_uid=0, swap_used_mb=100, linger=True)
    findings = diagnose(show("run5-system-unit-active.show"), facts)
    assert [f.level for f in findings] == ["OK"] * len(findings), format_findings(findings)
    assert "root-owned cgroup: honoured by both oomd rules" in by_check(findings)["ManagedOOMPreference"].why


def test_run4_unit_without_swap_protection_fails_when_swap_is_busy():
    findings = by_check(diagnose(show("run4-old-unit-active.show"), USER_FACTS))
    assert findings["MemorySwapMax"].level == "FAIL"
    assert "swap is busy now" in findings["MemorySwapMax"].why
    assert findings["ManagedOOMPreference"].level == "WARN"
    assert "ManagedOOMPreference=avoid" in findings["ManagedOOMPreference"].fix
    # The same unit with idle swap is a warning, not a failure.
    calm = by_check(diagnose(show("run4-old-unit-active.show"), dict(USER_FACTS, swap_used_mb=10)))
    assert calm["MemorySwapMax"].level == "WARN"


def test_swap_max_set_but_not_applied_by_the_cgroup():
    facts = dict(USER_FACTS, cgroup_swap_max="max")
    assert by_check(diagnose(show("run5-user-active.show"), facts))["MemorySwapMax"].level == "FAIL"
    facts = {k: v for k, v in USER_FACTS.items() if k != "cgroup_swap_max"}
    finding = by_check(diagnose(show("run5-user-active.show"), facts))["MemorySwapMax"]
    assert finding.level == "WARN" and "not delegated" in finding.why


def test_inactive_unit_warns_and_cannot_read_back_the_score():
    findings = by_check(diagnose(show("run5-user-inactive.show"), USER_FACTS))
    assert findings["unit"].level == "WARN" and "inactive" in findings["unit"].why
    assert findings["oom_score_adj"].level == "WARN"
    assert "no running process" in findings["oom_score_adj"].why


def test_unit_not_installed_is_one_fail():
    findings = diagnose(show("not-found.show"), USER_FACTS)
    assert findings == [Finding("FAIL", "unit", "tatu-sft-nosuch.service is not-found",
                                "tatu units install --run RUN, then systemctl --user daemon-reload")]


def test_gpu_nearly_full_and_no_gpu():
    facts = dict(USER_FACTS, cuda={"name": "RTX", "free_mb": 500, "total_mb": 12288})
    assert by_check(diagnose(show("run5-user-active.show"), facts))["gpu"].level == "WARN"
    facts = dict(USER_FACTS, cuda=None)
    assert "no CUDA" in by_check(diagnose(show("run5-user-active.show"), facts))["gpu"].why


def test_format_findings_puts_fix_under_non_ok_lines():
    text = format_findings([Finding("OK", "swap", "fine", "never shown"), Finding("FAIL", "x", "bad", "do y")])
    assert text == "OK   swap: fine\nFAIL x: bad\n     fix: do y"


def test_doctor_main_exit_code_follows_fail(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "gather", lambda run, check_gpu=True: (show("run5-user-active.show"), USER_FACTS))
    args = add_doctor_args(argparse.ArgumentParser()).parse_args(["run5", "--json"])
    assert doctor_main(args) == 1
    assert '"level": "FAIL"' in capsys.readouterr().out
    good = dict(USER_FACTS, oom_score_adj=-600, cgroup_uid=0, swap_used_mb=0, linger=True)
    monkeypatch.setattr(doctor, "gather", lambda run, check_gpu=True: (show("run5-system-unit-active.show"), good))
    assert doctor_main(add_doctor_args(argparse.ArgumentParser()).parse_args(["run5"])) == 0
    assert "FAIL" not in capsys.readouterr().out


def test_unreachable_manager_still_reports_the_host(monkeypatch):
    """No user manager to ask (no login session): one FAIL saying so, then the host's own checks."""
    from tatu.ops.doctor.checks import unreachable_manager

    facts = {"user": "op", "swap_total_mb": 8192.0, "swap_used_mb": 6000.0, "linger": False, "cuda": None}
    findings = unreachable_manager("Failed to connect to bus: No medium found", facts)
    assert findings[0].level == "FAIL" and findings[0].check == "user manager"
    assert "Failed to connect to bus" in findings[0].why
    checks = {f.check: f for f in findings[1:]}
    assert set(checks) == {"swap", "linger", "gpu"}
    assert checks["swap"].level != "OK"  # 6 GB of 8 GB swap in use is what the oomd swap rule watches


def _status_text(uid: int, cap_eff: int) -> str:
    return f"Name:\tsystemd\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapInh:\t0000000000000000\nCapEff:\t{cap_eff:016x}\n"


ALL_BUT_SYS_RESOURCE = 0x000001fffeffffff  # what root gets in the containers these tests run in


def test_proc_status_reads_uid_and_cap_sys_resource():
    import os

    me = doctor.proc_status("self")
    assert me["uid"] == os.geteuid()
    cap_line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("CapEff:"))
    assert me["cap_eff"] == int(cap_line.split()[1], 16)
    assert me["cap_sys_resource"] == bool(int(cap_line.split()[1], 16) & (1 << 24))
    assert doctor.parse_proc_status(_status_text(0, ALL_BUT_SYS_RESOURCE))["cap_sys_resource"] is False
    assert doctor.parse_proc_status(_status_text(0, ALL_BUT_SYS_RESOURCE | 1 << 24))["cap_sys_resource"] is True
    assert doctor.proc_status(2**22 + 12345) is None  # no such process


@pytest.mark.parametrize("uid, cap_eff, says, fix", [
    (0, ALL_BUT_SYS_RESOURCE, "runs as root but without CAP_SYS_RESOURCE", "--cap-add SYS_RESOURCE"),
    (1000, 0, "runs as uid 1000 without CAP_SYS_RESOURCE: a user manager cannot lower it", "drop-in"),
    (0, ALL_BUT_SYS_RESOURCE | 1 << 24, "with CAP_SYS_RESOURCE, so it could lower it", "systemctl --user cat"),
])
def test_oom_score_names_the_cause_it_can_see(uid, cap_eff, says, fix):
    """A root manager lacking CAP_SYS_RESOURCE (a container) is not blamed on 'a user manager'."""
    manager = {"pid": 812, **doctor.parse_proc_status(_status_text(uid, cap_eff))}
    oom = by_check(diagnose(show("run5-user-active.show"), dict(USER_FACTS, manager=manager)))["oom_score_adj"]
    assert oom.level == "FAIL" and "the process has 0" in oom.why and "pid 812" in oom.why
    assert says in oom.why and fix in oom.fix
    if uid == 0:
        assert "user manager" not in oom.why


def test_oom_score_without_a_readable_manager_says_what_this_shell_has():
    me = doctor.parse_proc_status(_status_text(0, ALL_BUT_SYS_RESOURCE))
    oom = by_check(diagnose(show("run5-user-active.show"), dict(USER_FACTS, self=me)))["oom_score_adj"]
    assert "could not be read" in oom.why and "this shell: root, without CAP_SYS_RESOURCE" in oom.why


def test_disk_facts_measure_free_space_and_the_last_state(tmp_path):
    import os
    import shutil

    run_dir = tmp_path / "runs" / "run5"
    (run_dir / "state").mkdir(parents=True)
    (run_dir / "state" / "model.safetensors").write_bytes(b"\0" * 300_000)
    (run_dir / "state" / "resume.json").write_bytes(b"{}" * 1000)
    facts = doctor.disk_facts(run_dir)
    expected = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(run_dir / "state") for f in files)
    assert facts["state_mb"] == pytest.approx(expected / 2**20)
    assert facts["free_mb"] == pytest.approx(shutil.disk_usage(run_dir).free / 2**20, rel=0.05)
    ok = check_disk(facts)
    assert ok.level == "OK" and str(run_dir) in ok.why and "last saved state is 0.3 MB" in ok.why
    # a run not started yet: the free space of the nearest existing parent, no state
    fresh = doctor.disk_facts(tmp_path / "runs" / "new")
    assert fresh["state_mb"] is None and "no saved state yet" in check_disk(fresh).why
    low = check_disk({"run_dir": str(run_dir), "free_mb": 40.0, "state_mb": 55.0})
    assert low.level == "WARN" and "may not fit" in low.why and "TATU_OUT" in low.fix


def test_run_dir_follows_the_env_file_over_the_unit_environment(tmp_path):
    env_file = tmp_path / "run5.env"
    env_file.write_text("TATU_OUT=/srv/big/runs\nSFT_GE=8\n")
    unit = {"Environment": "TATU_RUN=run5 TATU_OUT=elsewhere PYTHONUNBUFFERED=1", "WorkingDirectory": str(tmp_path),
            "EnvironmentFiles": f"{env_file} (ignore_errors=no)"}
    assert doctor.run_dir_of("run5", unit) == Path("/srv/big/runs/run5")
    env_file.write_text("SFT_GE=8\n")
    assert doctor.run_dir_of("run5", unit) == tmp_path / "elsewhere" / "run5"
    assert doctor.run_dir_of("run5", {"WorkingDirectory": str(tmp_path)}) == tmp_path / "runs" / "run5"


def test_doctor_shows_the_free_space_of_the_run_directory(monkeypatch, capsys, tmp_path):
    facts = dict(USER_FACTS, disk={"run_dir": str(tmp_path / "runs" / "run5"), "free_mb": 12.0, "state_mb": 30.0})
    monkeypatch.setattr(doctor, "gather", lambda run, check_gpu=True: (show("run5-user-active.show"), facts))
    doctor_main(add_doctor_args(argparse.ArgumentParser()).parse_args(["run5"]))
    out = capsys.readouterr().out
    assert f"WARN disk: 12 MB free for {tmp_path / 'runs' / 'run5'}; the last saved state is 30.0 MB" in out

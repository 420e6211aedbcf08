"""The DDP unit, tatu-sft-ddp@.service: the keys of tatu-sft@ but for the two that make torchrun
work under systemd, and accepted by systemd-analyze verify with an empty stderr."""
import os
import subprocess
import sys

from unit_files import REQUIRED_SERVICE, need_systemd_analyze, parse_unit

from tatu.ops.units import install_units, units_dir

DDP_UNIT = "tatu-sft-ddp@.service"


def test_ddp_unit_is_the_single_process_unit_but_for_torchrun():
    ddp = parse_unit((units_dir() / DDP_UNIT).read_text())
    single = parse_unit((units_dir() / "tatu-sft@.service").read_text())
    service = ddp["Service"]
    for key, value in REQUIRED_SERVICE.items():
        # rank 0 (a child of the launcher) sends READY, STATUS and the watchdog pings
        assert service.get(key) == (["all"] if key == "NotifyAccess" else [value]), key
    assert service["ExecStart"] == ["@TATU_PYTHON@ -m tatu.daemon.launch --instance %i"]  # the instance reaches every rank
    assert service["KillMode"] == ["mixed"]  # SIGTERM to the launcher alone; it relays to the ranks
    differing = {k for k in set(service) | set(single["Service"]) if service.get(k) != single["Service"].get(k)}
    assert differing == {"NotifyAccess", "ExecStart"}
    assert ddp["Unit"].keys() == single["Unit"].keys() and ddp["Install"] == single["Install"]


def test_rendered_ddp_unit_passes_systemd_analyze_verify_with_empty_stderr(tmp_path):
    analyze = need_systemd_analyze()
    dest, workdir = tmp_path / "user", tmp_path / "work"
    workdir.mkdir()
    install_units(dest=dest, env_dest=tmp_path / "tatu", reload=False, workdir=workdir)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    instance = tmp_path / "tatu-sft-ddp@verify.service"
    instance.write_text((dest / DDP_UNIT).read_text())
    assert f"ExecStart={sys.executable} -m tatu.daemon.launch" in instance.read_text()
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = subprocess.run([analyze, "--user", "verify", str(instance)], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr

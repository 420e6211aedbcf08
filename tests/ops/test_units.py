"""The systemd units: rendered by install_units, accepted by systemd-analyze, carrying the required keys."""
import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from unit_files import REQUIRED_SERVICE, need_systemd_analyze, parse_unit

from tatu import exitcodes
from tatu.daemon.config import load_config
from tatu.envfile import parse_env_file
from tatu.systemctl import SystemctlError
from tatu.ops.units import TEMPLATE, UnitsError, dedicated_unit, install_units, render_unit, units_dir, units_main



@pytest.fixture
def installed(tmp_path):
    dest, env_dest, workdir = tmp_path / "user", tmp_path / "tatu", tmp_path / "work"
    workdir.mkdir()
    result = install_units(run="run5", dest=dest, env_dest=env_dest, reload=False, workdir=workdir, example=True)
    return result, dest, env_dest, workdir


def test_install_renders_every_unit_and_copies_the_env_file(installed):
    result, dest, env_dest, workdir = installed
    names = sorted(p.name for p in dest.iterdir())
    assert names == ["tatu-sft-ddp@.service", "tatu-sft-run5.service", "tatu-sft@.service", "tatu-sweep@.service"]
    assert env_dest / "run5.env" in result.written
    assert (env_dest / "run5.env").read_text() == (units_dir() / "runs" / "run5.env").read_text()
    assert oct((env_dest / "run5.env").stat().st_mode & 0o777) == oct(0o600)
    for unit in dest.iterdir():
        text = unit.read_text()
        assert "@TATU_" not in text
        service = parse_unit(text)["Service"]
        if unit.name.startswith("tatu-sweep@"):
            # a tatu subcommand: it stays valid when the module behind it moves
            assert service["ExecStart"] == [f"{Path(sys.executable).parent / 'tatu'} sweep coordinate"]
        else:  # the DDP unit: torchrun through tatu's launcher
            module = "tatu.daemon.launch" if unit.name == "tatu-sft-ddp@.service" else "tatu.daemon"
            assert service["ExecStart"][0].startswith(f"{sys.executable} -m {module} --instance ")
        assert service["WorkingDirectory"] == [str(workdir)]


def test_the_restart_policy_spares_exactly_the_codes_a_restart_cannot_fix():
    # README.md#exit-codes: 10, 11, 65, 74, 75 and 78 are "not restarted by systemd" (literals, not the module's names)
    assert set(exitcodes.NOT_RESTARTED) == {10, 11, 65, 74, 75, 78}
    assert exitcodes.OK not in exitcodes.NOT_RESTARTED and 1 not in exitcodes.NOT_RESTARTED  # a crash is retried


@pytest.mark.parametrize("run", ["%i", "run5"])
def test_units_carry_the_required_keys(run):
    template = (units_dir() / TEMPLATE).read_text()
    unit = parse_unit(template if run == "%i" else dedicated_unit(template, run))
    service = unit["Service"]
    for key, value in REQUIRED_SERVICE.items():
        assert service.get(key) == [value], key
    for key in ("WatchdogSec", "TimeoutStartSec", "TimeoutStopSec", "RestartSec", "RuntimeDirectory"):
        assert service.get(key), key
    assert "StartLimitIntervalSec" in unit["Unit"] and "StartLimitBurst" in unit["Unit"]
    assert "StartLimitIntervalSec" not in service  # only honoured in [Unit] nowadays
    assert service["EnvironmentFile"] == [f"%E/tatu/{run}.env"]
    assert service["SyslogIdentifier"] == [f"tatu-sft-{run}"]
    environment = " ".join(service["Environment"]).split()
    assert "PYTHONUNBUFFERED=1" in environment and "PYTHONFAULTHANDLER=1" in environment
    assert service["ExecStart"] == [f"@TATU_PYTHON@ -m tatu.daemon --instance {run}"]
    assert not any(v.startswith("TATU_RUN=") for v in environment)  # the instance names the run


@pytest.mark.parametrize("unit", sorted(p.name for p in units_dir().glob("*.service")))
def test_every_shipped_unit_asks_the_oom_killers_to_spare_it(unit):
    service = parse_unit((units_dir() / unit).read_text())["Service"]
    assert service.get("OOMScoreAdjust") == ["-600"] and service.get("ManagedOOMPreference") == ["avoid"]


@pytest.mark.parametrize("env_file", sorted((units_dir() / "runs").glob("*.env")), ids=lambda p: p.stem)
def test_shipped_env_files_are_valid_run_configs_named_after_their_run(env_file):
    """Read as `tatu smoke --env-file` and the daemon read them: every name known, every value in
    range. The unit sets TATU_RUN to its instance; a file that sets it too must agree."""
    config, _ = load_config({"TATU_RUN": env_file.stem, **parse_env_file(env_file)})
    assert config.run == env_file.stem


def test_run5_is_the_designs_mix():
    config, _ = load_config(parse_env_file(units_dir() / "runs" / "run5.env"))
    assert config.mix == {"sft": 8, "replay": 6}  # 6 of 14 micro-batches: the 43% English of the design


def test_every_rendered_unit_passes_systemd_analyze_verify_with_empty_stderr(installed, tmp_path):
    analyze = need_systemd_analyze()
    _, dest, _, _ = installed
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    # The template is checked as an instance so that %i resolves as it will at start.
    instance = tmp_path / "tatu-sft@verify.service"
    instance.write_text((dest / "tatu-sft@.service").read_text())
    for unit in (instance, dest / "tatu-sft-run5.service"):
        proc = subprocess.run([analyze, "--user", "verify", str(unit)], capture_output=True, text=True,
                              env=env, timeout=60)
        # verify exits 0 after "Unknown key ... ignoring": stderr is the real verdict.
        assert proc.returncode == 0 and proc.stderr == "", f"{unit.name}: {proc.stderr}"


def test_verify_would_catch_a_bad_key(tmp_path):
    """The check above can fail: the same call reports an unknown key on stderr."""
    analyze = need_systemd_analyze()
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    unit = tmp_path / "tatu-sft@bad.service"
    text = render_unit((units_dir() / "tatu-sft@.service").read_text(), Path(sys.executable), tmp_path)
    unit.write_text(text.replace("LimitCORE=0", "LimitCORE=0\nMemorySwapMaximum=0"))
    proc = subprocess.run([analyze, "--user", "verify", str(unit)], capture_output=True, text=True,
                          env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)}, timeout=60)
    assert "Unknown key 'MemorySwapMaximum'" in proc.stderr


def test_user_edited_env_file_is_kept_unless_forced(installed):
    _, dest, env_dest, workdir = installed
    edited = env_dest / "run5.env"
    edited.write_text("TATU_RUN=run5\nSFT_GE=4\n")
    result = install_units(run="run5", dest=dest, env_dest=env_dest, reload=False, workdir=workdir, example=True)
    assert result.kept == [edited] and edited.read_text() == "TATU_RUN=run5\nSFT_GE=4\n"
    assert result.written == []  # units unchanged, nothing rewritten
    result = install_units(run="run5", dest=dest, env_dest=env_dest, reload=False, workdir=workdir,
                           overwrite_env=True, example=True)
    assert result.written == [edited] and "SFT_GE=8" in edited.read_text()


def test_given_env_file_and_missing_env_file(tmp_path):
    custom = tmp_path / "tiny.env"
    custom.write_text("TATU_RUN=tiny\nMIX_STEPS_LIMIT=2\n")
    result = install_units(run="tiny", dest=tmp_path / "u", env_dest=tmp_path / "e", reload=False,
                           env_file=custom, workdir=tmp_path)
    assert (tmp_path / "e" / "tiny.env").read_text() == custom.read_text()
    assert tmp_path / "e" / "tiny.env" in result.written
    # a run of one's own is the template's instance: no second unit that could start it twice
    assert sorted(p.name for p in (tmp_path / "u").iterdir()) == ["tatu-sft-ddp@.service", "tatu-sft@.service", "tatu-sweep@.service"]  # no run unit for an --env-file run
    with pytest.raises(UnitsError, match="--run nosuch: no env file .*e/nosuch.env: write the run's variables there") as refused:
        install_units(run="nosuch", dest=tmp_path / "u", env_dest=tmp_path / "e", reload=False)
    assert refused.value.code == exitcodes.BAD_CONFIG


def test_reload_calls_systemctl_user_daemon_reload(tmp_path, monkeypatch):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    log = tmp_path / "calls"
    (fake_bin / "systemctl").write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    (fake_bin / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    result = install_units(dest=tmp_path / "u", env_dest=tmp_path / "e", workdir=tmp_path)
    assert result.reloaded and log.read_text() == "--user daemon-reload\n"
    (fake_bin / "systemctl").write_text("#!/bin/sh\necho 'Failed to connect to bus' >&2\nexit 1\n")
    result = install_units(dest=tmp_path / "u", env_dest=tmp_path / "e", workdir=tmp_path)
    assert not result.reloaded and "daemon-reload failed (1): Failed to connect to bus" in result.reload_error


def test_render_rejects_paths_systemd_would_split_and_escapes_percent(tmp_path):
    template = "ExecStart=@TATU_PYTHON@ -m tatu.daemon\nWorkingDirectory=@TATU_WORKDIR@\n"
    with pytest.raises(UnitsError, match="contains whitespace"):
        render_unit(template, Path("/opt/my env/bin/python"), tmp_path)
    with pytest.raises(UnitsError, match="must be an absolute path"):
        render_unit(template, Path("bin/python"), tmp_path)
    assert "WorkingDirectory=/w/100%%" in render_unit(template, Path("/usr/bin/python3"), Path("/w/100%"))
    with pytest.raises(UnitsError, match="unrendered placeholder"):
        render_unit(template + "X=@TATU_OTHER@\n", Path("/usr/bin/python3"), tmp_path)


def _assignments(text: str) -> dict[str, str]:
    """As systemd reads an EnvironmentFile: KEY=VALUE lines, comments skipped, the last one wins."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip("\"'")
    return values


@pytest.mark.parametrize("written", ["TATU_RUN=run5", 'TATU_RUN="run5"', "  TATU_RUN = run5"])
def test_env_file_of_another_run_is_installed_with_the_instance_name(tmp_path, capsys, written):
    """`units install --run run7 --env-file run5.env` must not make tatu-sft@run7 train runs/run5
    (EnvironmentFile= overrides the unit's Environment=TATU_RUN=%i)."""
    source = tmp_path / "run5.env"
    source.write_text(f"# run 5\n{written}\nSFT_GE=8\nREPLAY_N=6\n")
    args = argparse.Namespace(action="install", run="run7", env_file=source, force_env=False, workdir=tmp_path,
                              dest=tmp_path / "u", env_dest=tmp_path / "e", no_reload=True)
    assert units_main(args) == 0
    installed = (tmp_path / "e" / "run7.env").read_text()
    assert _assignments(installed) == {"TATU_RUN": "run7", "SFT_GE": "8", "REPLAY_N": "6"}
    err = capsys.readouterr().err
    assert "TATU_RUN=run5" in err and "run7" in err and str(source) in err
    assert source.read_text() == f"# run 5\n{written}\nSFT_GE=8\nREPLAY_N=6\n"  # the source is left alone


def test_shipped_run5_env_installs_unchanged_for_run5(tmp_path):
    result = install_units(run="run5", dest=tmp_path / "u", env_dest=tmp_path / "e", reload=False, workdir=tmp_path,
                           example=True)
    assert (tmp_path / "e" / "run5.env").read_text() == (units_dir() / "runs" / "run5.env").read_text()
    assert result.notes == []


def _args(tmp_path, **given) -> argparse.Namespace:
    values = dict(action="install", run=None, env_file=None, example=False, force_env=False, workdir=tmp_path,
                  dest=tmp_path / "u", env_dest=tmp_path / "e", no_reload=True)
    return argparse.Namespace(**{**values, **given})


def test_run_without_env_file_installs_the_operators_own_never_the_repositorys(tmp_path, capsys):
    """`--run run5` is the operator's ~/.config/tatu/run5.env, not units/runs/run5.env (which seeds
    from runs/run2/sft_best.pt, a checkpoint only the repository's author has)."""
    own = tmp_path / "e" / "run5.env"
    own.parent.mkdir()
    own.write_text("TATU_DATA=data/build\nTATU_SEED_CKPT=runs/trunk/final\nSFT_GE=8\nREPLAY_N=6\n")
    assert units_main(_args(tmp_path, run="run5")) == 0
    assert own.read_text() == "TATU_DATA=data/build\nTATU_SEED_CKPT=runs/trunk/final\nSFT_GE=8\nREPLAY_N=6\n"
    out = capsys.readouterr().out
    assert "systemctl --user start tatu-sft@run5" in out
    assert not (tmp_path / "u" / "tatu-sft-run5.service").exists()  # one unit per run: the template's instance
    # with none there: refused, naming the file it looked for, nothing installed
    own.unlink()
    assert units_main(_args(tmp_path, run="run5", dest=tmp_path / "u2")) == exitcodes.BAD_CONFIG
    err = capsys.readouterr().err
    assert err.startswith("tatu units install: --run run5: no env file ") and str(own) in err
    assert not (tmp_path / "u2").exists() and not own.exists()
    # the repository's example only when asked by name
    assert units_main(_args(tmp_path, run="run5", example=True)) == 0
    assert own.read_text() == (units_dir() / "runs" / "run5.env").read_text()


def test_no_user_manager_writes_everything_and_names_what_failed_and_the_fix(tmp_path, monkeypatch, capsys):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "systemctl").write_text("#!/bin/sh\necho 'Failed to connect to bus: No medium found' >&2\nexit 1\n")
    (fake_bin / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    mine = tmp_path / "mine.env"
    mine.write_text("TATU_DATA=data/build\nSFT_GE=8\n")
    code = units_main(_args(tmp_path, run="mine", env_file=mine, no_reload=False))
    assert code == exitcodes.NO_MANAGER == 1  # README's exit-code table: `tatu units install`
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith("tatu units install: wrote ")
    for written in (tmp_path / "u" / "tatu-sft@.service", tmp_path / "e" / "mine.env"):
        assert written.is_file() and str(written) in line
    assert "daemon-reload failed (1): Failed to connect to bus" in line
    assert "fix: `systemctl --user daemon-reload` in a login session" in line


def test_doctor_names_installed_units_older_than_the_code(tmp_path):
    from tatu.ops.units import outdated_units

    dest = tmp_path / "u"
    install_units(dest=dest, env_dest=tmp_path / "e", reload=False, workdir=tmp_path)
    assert outdated_units(dest) == []
    sweep_unit = dest / "tatu-sweep@.service"
    # as installed before the coordinator moved: the module path an update broke
    old = sweep_unit.read_text().replace(f"{Path(sys.executable).parent / 'tatu'} sweep coordinate",
                                         f"{sys.executable} -m tatu.sweep.run.coordinator")
    assert old != sweep_unit.read_text()
    sweep_unit.write_text(old)
    assert outdated_units(dest) == ["tatu-sweep@.service"]


def test_the_sweep_units_command_is_a_tatu_subcommand():
    proc = subprocess.run([str(Path(sys.executable).parent / "tatu"), "sweep", "coordinate"], capture_output=True,
                          text=True, env={k: v for k, v in os.environ.items() if k != "SWEEP_DIR"}, timeout=120)
    assert proc.returncode == exitcodes.BAD_CONFIG, proc.stderr
    assert "SWEEP_DIR is not set" in proc.stderr

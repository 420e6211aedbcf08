"""The run configuration: the layers it is built from (the environment, an env file, --set, the
unit instance, the smoke's own) and nothing else, where each value came from, and what is
refused with 78 (a typo, a value out of range, a percent typed as a fraction, an instance that
contradicts TATU_RUN) before torch (or scipy, the sweep statistics' t) loads or anything is written."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_world import clean_environ, daemon, sft_env

from tatu.daemon.config import ConfigError, load_config
from tatu.envfile import parse_env_file


def test_typo_exits_78_suggesting_the_name_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    env = {"REPLAY_M": "6", "TATU_DATA": str(tmp_path), "TATU_OUT": str(out), "TATU_SEED_CKPT": str(tmp_path)}
    proc = daemon(env)
    assert proc.returncode == 78
    assert "REPLAY_M" in proc.stderr and "did you mean REPLAY_N?" in proc.stderr
    assert not out.exists()


# What the fail-fast path never imports: torch, and scipy (a runtime dependency since the sweep's
# seed statistics take Student's t from it), both slow to import
SLOW_TO_IMPORT = ("torch", "scipy")


def slow_imports(stderr: str) -> list[str]:
    """The modules of SLOW_TO_IMPORT in a `python -X importtime` log; asserts the log is real."""
    imported = [line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")]
    assert "pydantic" in imported  # the log is real
    return [m for m in imported if m.split(".")[0] in SLOW_TO_IMPORT]


def test_config_errors_are_decided_before_torch_is_imported(tmp_path):
    """A bad configuration exits fast, checked without timing: the process never imports torch or scipy."""
    env = {**clean_environ(), "REPLAY_M": "6", "TATU_DATA": str(tmp_path), "TATU_SEED_CKPT": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tatu.daemon"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 78
    assert slow_imports(proc.stderr) == []


@pytest.mark.parametrize("variable", ["TATU_SEED_CKPT", "TATU_TRUNK_CKPT"])
def test_a_missing_seed_or_trunk_exits_65_naming_it_before_torch_is_imported(tmp_path, variable):
    """A mistyped checkpoint path is refused as fast as a typo: the process never imports torch or scipy,
    and the one error line names the variable, its value and where it came from."""
    out, missing = tmp_path / "out", tmp_path / "no-such-ckpt"
    env = {**clean_environ(), "TATU_DATA": str(tmp_path), "TATU_OUT": str(out), "TATU_SEED_CKPT": str(tmp_path),
           variable: str(missing)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tatu.daemon"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 65, proc.stderr[-2000:]
    message = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert message == [f"tatu: {variable}={missing} [env]: no such checkpoint (no file or directory {missing})"]
    assert slow_imports(proc.stderr) == []
    assert f"{variable}" in proc.stdout  # the configuration, with sources, as a started run prints it
    assert not out.exists()


@pytest.mark.parametrize("missing_is", ["absent", "a file"])
def test_a_missing_data_dir_exits_65_naming_it_before_torch_is_imported(tmp_path, missing_is):
    """TATU_DATA is checked with the seed and trunk: one line naming it, 65, torch and scipy never imported."""
    out, missing = tmp_path / "out", tmp_path / "no-such-data"
    if missing_is == "a file":
        missing.write_text("")
    env = {**clean_environ(), "TATU_DATA": str(missing), "TATU_OUT": str(out), "TATU_SEED_CKPT": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tatu.daemon"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 65, proc.stderr[-2000:]
    message = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    what = "not a directory" if missing_is == "a file" else f"no directory {missing}"
    assert message == [f"tatu: TATU_DATA={missing} [env]: no such data directory ({what}; `tatu data build` writes one)"]
    assert slow_imports(proc.stderr) == []
    assert not out.exists()


def test_a_restart_does_not_need_its_seed(tmp_path):
    """A restart starts from its own resume state: a seed moved since is no reason to refuse it;
    a smoke (always a fresh run dir) reads its seed again, so it is checked."""
    from tatu.daemon.main import check_start_paths
    from tatu.daemon.run.paths import RunDir
    from tatu.data.manifest import DataError

    config, origins = load_config({"TATU_DATA": str(tmp_path), "TATU_SEED_CKPT": str(tmp_path / "moved"),
                                   "TATU_OUT": str(tmp_path / "runs"), "TATU_RUN": "r"})
    with pytest.raises(DataError, match="TATU_SEED_CKPT="):
        check_start_paths(config, origins, fresh=False)
    RunDir(config.run_dir).state.mkdir(parents=True)
    check_start_paths(config, origins, fresh=False)
    with pytest.raises(DataError, match="TATU_SEED_CKPT="):
        check_start_paths(config, origins, fresh=True)


@pytest.mark.parametrize("name,value", [("REPLAY_N", "-1"), ("MIX_FORGET_LIMIT", "0"), ("EVAL_EVERY", "0"),
                                        ("TATU_LR", "nan"), ("TATU_DEVICE", "gpu")])
def test_out_of_range_value_exits_78(tmp_path, name, value):
    out = tmp_path / "out"
    env = {"TATU_DATA": str(tmp_path), "TATU_OUT": str(out), "TATU_SEED_CKPT": str(tmp_path), name: value}
    proc = daemon(env)
    assert proc.returncode == 78, proc.stderr
    assert name in proc.stderr
    assert not out.exists()


def test_config_reads_only_the_mapping_it_is_given(monkeypatch, tmp_path):
    monkeypatch.setenv("TATU_OUT", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("TATU_TRUNK_CKPT", str(tmp_path / "trunk"))
    config, origins = load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", "TATU_OUT": ""})
    assert config.out == Path("runs") and origins["TATU_OUT"] == "default"
    assert config.trunk_ckpt is None and origins["TATU_TRUNK_CKPT"] == "default"


def test_empty_values_in_a_real_env_file_mean_unset(tmp_path):
    """What a unit gets from `EnvironmentFile=` lines `TATU_OUT=`: its default, labelled so."""
    env_file = tmp_path / "run.env"
    env_file.write_text(f"TATU_DATA={tmp_path / 'no-data'}\nTATU_SEED_CKPT={tmp_path / 'seed'}\nTATU_OUT=\n"
                        "TATU_TRUNK_CKPT=\nTATU_DEVICE=cpu\n")
    work = tmp_path / "work"
    work.mkdir()
    proc = daemon(parse_env_file(env_file), cwd=work)
    assert proc.returncode == 65, proc.stderr[-2000:]  # the seed (checked first, before torch) and the data dir do not exist
    assert re.search(r"TATU_OUT\s+= runs\s+\[default\]", proc.stdout), proc.stdout
    assert re.search(r"TATU_TRUNK_CKPT\s+= None\s+\[default\]", proc.stdout)
    assert re.search(r"TATU_DATA\s+= \S+no-data\s+\[env\]", proc.stdout)
    assert not list(work.iterdir())  # and a rejected start leaves nothing


def test_printed_sources_say_where_each_value_came_from(tmp_path):
    env_file = tmp_path / "run.env"
    env_file.write_text(f"TATU_DATA={tmp_path / 'no-data'}\nTATU_SEED_CKPT={tmp_path / 'seed'}\nMIX_STEPS_LIMIT=7\n")
    proc = subprocess.run([sys.executable, "-m", "tatu.ops.cli", "run", "--env-file", str(env_file), "--set", "SFT_GE=3"],
                          env={**clean_environ(), "REPLAY_N": "2", "TATU_OUT": ""}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 65, proc.stderr[-2000:]
    for name, value, source in (("REPLAY_N", "2", "env"), ("MIX_STEPS_LIMIT", "7", "env-file"),
                                ("SFT_GE", "3", "override"), ("EVAL_EVERY", "8", "default"), ("TATU_OUT", "runs", "default")):
        assert re.search(rf"{name}\s+= {value}\s+\[{source}\]", proc.stdout), (name, proc.stdout)


@pytest.mark.slow
def test_smoke_with_an_env_file_uses_what_the_unit_would_get(tiny_trunk, tmp_path, monkeypatch, capsys):
    from tatu.ops.cli import main as tatu

    env = sft_env(tiny_trunk, tmp_path / "runs", MIX_STEPS_LIMIT=4)
    del env["TATU_RUN"]  # named by the instance, as units/runs/example.env says
    env_file = tmp_path / "tiny.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    # The caller's shell: junk the unit never sees.
    monkeypatch.setenv("REPLAY_N", "not-a-number")
    monkeypatch.setenv("TATU_RUN", "someone-else")
    assert tatu(["smoke", "--env-file", str(env_file)]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"TATU_RUN\s+= tiny-smoke\s+\[smoke\]", printed)
    assert re.search(r"REPLAY_N\s+= 1\s+\[env-file\]", printed)
    assert (tmp_path / "runs" / "tiny-smoke" / "final").is_dir()
    assert not (tmp_path / "runs" / "someone-else-smoke").exists()
    # and a TATU_RUN in the file that contradicts the instance fails as the unit would
    env_file.write_text(env_file.read_text() + "TATU_RUN=run5\n")
    assert tatu(["smoke", "--env-file", str(env_file)]) == 78


def test_an_instance_that_contradicts_tatu_run_exits_78_naming_both(tmp_path):
    env = {"TATU_RUN": "run5", "TATU_DATA": str(tmp_path), "TATU_SEED_CKPT": str(tmp_path), "TATU_OUT": str(tmp_path / "out")}
    proc = daemon(env, "--instance", "run7")
    assert proc.returncode == 78
    assert "TATU_RUN=run5" in proc.stderr and "instance run7" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bad", ["TATU_TRUNK_CKPT", "TATU_DATA"])
def test_a_rejected_start_leaves_no_trace(tiny_trunk, tmp_path, bad):
    out = tmp_path / "out"
    proc = daemon(sft_env(tiny_trunk, out, **{bad: str(tmp_path / "nonexistent")}))
    assert proc.returncode == 65, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "nonexistent" in proc.stdout + proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("name, value, meant", [("MIX_FORGET_LIMIT", "5", "0.05"), ("TATU_TRUNK_LIMIT", "15", "0.15"),
                                                ("TATU_VERDICT_MIN_GAIN", "2", "0.02"), ("TATU_DROPOUT", "10", "0.1")])
def test_a_percent_typed_as_a_fraction_is_refused(name, value, meant):
    with pytest.raises(ConfigError, match=rf"{name}={value} \[env\]: a fraction .*did you mean {re.escape(meant)}\?"):
        load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", name: value})
    config, _ = load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", name: meant})
    assert getattr(config, {"MIX_FORGET_LIMIT": "mix_forget_limit", "TATU_TRUNK_LIMIT": "trunk_limit",
                            "TATU_VERDICT_MIN_GAIN": "verdict_min_gain", "TATU_DROPOUT": "dropout"}[name]) == float(meant)


def test_mix_forget_limit_5_exits_78_before_anything_runs(tmp_path):
    proc = daemon({"MIX_FORGET_LIMIT": "5", "TATU_DATA": str(tmp_path), "TATU_SEED_CKPT": str(tmp_path),
                   "TATU_OUT": str(tmp_path / "out")})
    assert proc.returncode == 78 and "did you mean 0.05?" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["run", "smoke"])
def test_a_bad_env_file_line_is_78_in_one_line_naming_file_and_line(tmp_path, capsys, command):
    """tatu/envfile.py raises its own EnvFileError (a library never raises the CLI's TatuExit);
    the command line turns it into its one line and 78."""
    from tatu.ops.cli import main as tatu

    env_file = tmp_path / "run5.env"
    env_file.write_text("TATU_RUN=run5\nnot a line\n")
    assert tatu([command, "--env-file", str(env_file)]) == 78
    assert capsys.readouterr().err.splitlines() == [f"tatu {command}: {env_file}:2: expected KEY=VALUE"]


@pytest.mark.parametrize("command", ["run", "smoke"])
def test_a_bad_value_in_an_env_file_is_one_line_in_tatus_voice_naming_its_line(tmp_path, capsys, monkeypatch, command):
    """`tatu <command>: FILE:LINE: VAR=VALUE: reason (default: D)`, not pydantic's wording
    ("Input should be a valid integer, unable to parse string as an integer")."""
    from tatu.ops.cli import main as tatu

    for name in list(os.environ):
        if name.startswith(("SFT_", "REPLAY_", "MIX_", "EVAL_", "TATU_")):
            monkeypatch.delenv(name)
    path = tmp_path / "run5.env"
    path.write_text(f"TATU_DATA={tmp_path}\nTATU_SEED_CKPT={tmp_path}\nMIX_STEPS_LIMIT=ten\n")
    assert tatu([command, "--env-file", str(path)]) == 78
    assert capsys.readouterr().err.splitlines() == [
        f"tatu {command}: {path}:3: MIX_STEPS_LIMIT=ten: not a whole number (default: 200)"]
    # from the shell instead: the variable and where it came from
    monkeypatch.setenv("MIX_STEPS_LIMIT", "0")
    path.write_text(f"TATU_DATA={tmp_path}\nTATU_SEED_CKPT={tmp_path}\n")
    assert tatu(["run", "--env-file", str(path)]) == 78
    assert capsys.readouterr().err.splitlines()[-1].endswith("MIX_STEPS_LIMIT=0 [env]: must be at least 1 (default: 200)")

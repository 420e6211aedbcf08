"""An env file is tatu's alone, and a typo in the environment is caught (issue 44 item 1).

Every name in an env file (`tatu run/smoke --env-file`, a unit's EnvironmentFile named by
TATU_ENV_FILE or found at %E/tatu/NAME.env, units/runs/*.env at `tatu units install`) is a known
variable or a one-line refusal, exit 78, naming the file, the line and the nearest known name. In
the process environment (systemd and torchrun pass more than tatu's) a name one edit from a known
one is refused the same way, and everything else is another program's and passes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_world import clean_environ

from tatu.daemon.config import ConfigError, check_env_file, known_variables, load_config
from tatu.ops.cli import main as tatu

# (typed, meant): plausible slips of a person writing an env file by hand
TYPOS = [
    ("SFTGE", "SFT_GE"), ("sft_ge", "SFT_GE"), ("SFT_EG", "SFT_GE"), ("SFT_GE_", "SFT_GE"),
    ("TATU_LRR", "TATU_LR"), ("TAU_LR", "TATU_LR"), ("TATU_LRATE", "TATU_LR"), ("TATU_MIN_LRR", "TATU_MIN_LR"),
    ("REPLAYN", "REPLAY_N"), ("REPLAY_M", "REPLAY_N"), ("REPLY_N", "REPLAY_N"), ("REPLAY__N", "REPLAY_N"),
    ("MIX_STEP_LIMIT", "MIX_STEPS_LIMIT"), ("MIX_STEPS_LIMT", "MIX_STEPS_LIMIT"),
    ("MIX_FORGETLIMIT", "MIX_FORGET_LIMIT"), ("MIX_FORGOT_LIMIT", "MIX_FORGET_LIMIT"), ("MIX_FORGET_CL", "MIX_FORGET_CI"),
    ("EVAL_EVRY", "EVAL_EVERY"), ("EVALEVERY", "EVAL_EVERY"), ("EVAL_EN_AL", "EVAL_EN_ALL"),
    ("TATU_SEED_CKTP", "TATU_SEED_CKPT"), ("TATU_SEEDCKPT", "TATU_SEED_CKPT"), ("TATU_TRUNK_CPKT", "TATU_TRUNK_CKPT"),
    ("Tatu_Seed", "TATU_SEED"), ("TATU_SEDD", "TATU_SEED"), ("TATU_DEVCE", "TATU_DEVICE"), ("TATU_DAT", "TATU_DATA"),
    ("TATU_WARMUP_STEP", "TATU_WARMUP_STEPS"), ("TATU_MICROBATCH", "TATU_MICRO_BATCH"), ("TATU_PRECISON", "TATU_PRECISION"),
    ("TATU_THREAD", "TATU_THREADS"), ("TATU_SCHEDUEL", "TATU_SCHEDULE"), ("TATU_NLAYER", "TATU_N_LAYER"),
]
# One edit from a known name once case and underscores are set aside: refused in the environment too
ONE_EDIT = [(typed, meant) for typed, meant in TYPOS if typed not in ("TATU_LRATE",)]

# What systemd, a login shell, torchrun, Ray and the numeric libraries put in a process's environment
ORDINARY = ["PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "USER", "LOGNAME", "SHELL", "TERM", "PWD", "SHLVL", "TZ",
            "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS", "OMP_PROC_BIND", "MKL_NUM_THREADS",
            "MKL_CBWR", "MKL_DYNAMIC", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER",
            "PYTHONPATH", "VIRTUAL_ENV", "INVOCATION_ID", "JOURNAL_STREAM", "NOTIFY_SOCKET", "WATCHDOG_USEC",
            "WATCHDOG_PID", "RUNTIME_DIRECTORY", "SYSTEMD_EXEC_PID", "MANAGERPID", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME",
            "DBUS_SESSION_BUS_ADDRESS", "RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "PYTORCH_CUDA_ALLOC_CONF", "NCCL_DEBUG", "RAY_ADDRESS",
            "HF_HOME", "TOKENIZERS_PARALLELISM", "CI", "TMPDIR", "SWEEP_DIR", "TATU_ENV_FILE"]
BASE = "TATU_DATA=data\nTATU_SEED_CKPT=seed\n"


def _env_file(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "run5.env"
    path.write_text(BASE + line + "\n")
    return path


@pytest.mark.parametrize("typed, meant", TYPOS)
def test_a_typo_in_an_env_file_is_refused_naming_file_line_and_the_meant_name(tmp_path, typed, meant):
    path = _env_file(tmp_path, f"{typed}=4")
    with pytest.raises(ConfigError) as info:
        check_env_file(path)
    assert str(info.value) == f"{path}:3: unknown variable {typed} (did you mean {meant}?)"


@pytest.mark.parametrize("command", ["run", "smoke"])
def test_run_and_smoke_refuse_the_env_files_typo_with_78_in_one_line(tmp_path, monkeypatch, capsys, command):
    """SFTGE=4 once ran as SFT_GE = 8 [default] and exit 0 (issue 44)."""
    for name in list(os.environ):
        if name.startswith(("SFT_", "REPLAY_", "MIX_", "EVAL_", "TATU_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    path = _env_file(tmp_path, "SFTGE=4")
    assert tatu([command, "--env-file", str(path)]) == 78
    assert capsys.readouterr().err.splitlines() == [
        f"tatu {command}: {path.absolute()}:3: unknown variable SFTGE (did you mean SFT_GE?)"]
    assert list(tmp_path.iterdir()) == [path]  # nothing written


@pytest.mark.parametrize("line, said", [
    ("OMP_NUM_THREADS=4", "OMP_NUM_THREADS is not a tatu variable: an env file holds tatu's variables only "
                          "(another program's go in the process's environment: the shell's, or the unit's "
                          "Environment=); the thread count is TATU_THREADS"),
    ("CUDA_VISIBLE_DEVICES=1", "CUDA_VISIBLE_DEVICES is not a tatu variable: an env file holds tatu's variables only "
                               "(another program's go in the process's environment: the shell's, or the unit's "
                               "Environment=)"),
    ("TATU_ENV_FILE=/x.env", "TATU_ENV_FILE is the unit's to set (the file it names is this one), not a run variable"),
])
def test_another_programs_variable_in_an_env_file_is_refused_saying_where_it_goes(tmp_path, line, said):
    path = _env_file(tmp_path, line)
    with pytest.raises(ConfigError) as info:
        check_env_file(path)
    assert str(info.value) == f"{path}:3: {said}"


@pytest.mark.parametrize("typed, meant", ONE_EDIT)
def test_a_typo_in_the_environment_one_edit_from_a_known_name_is_refused(typed, meant):
    with pytest.raises(ConfigError) as info:
        load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", typed: "4"})
    assert str(info.value) == f"unknown variable {typed} (did you mean {meant}?)"


def test_the_environments_own_variables_are_left_alone():
    """This machine's environment and what systemd, torchrun and the libraries set: none is refused."""
    environment = {**clean_environ(), **{name: "1" for name in ORDINARY}}
    config, _ = load_config({**environment, "TATU_DATA": "d", "TATU_SEED_CKPT": "s"})
    assert config.sft_ge == 8 and not set(environment) & set(known_variables())


def test_the_units_env_file_is_checked_by_the_daemon_naming_its_line(tmp_path):
    """Under a unit the daemon's environment holds the file's variables mixed with systemd's: the unit
    names the file (TATU_ENV_FILE=%E/tatu/%i.env), so the refusal names its line. A unit installed
    before it did: the daemon finds %E/tatu/NAME.env itself."""
    config_home = tmp_path / "config"
    path = config_home / "tatu" / "run5.env"
    path.parent.mkdir(parents=True)
    path.write_text(f"TATU_DATA={tmp_path}\nTATU_SEED_CKPT={tmp_path}\n# the seed run's\nSFTGE=4\n")
    as_systemd_sets = {"TATU_DATA": str(tmp_path), "TATU_SEED_CKPT": str(tmp_path), "SFTGE": "4",
                       "INVOCATION_ID": "0123", "XDG_CONFIG_HOME": str(config_home)}
    for env in ({**as_systemd_sets, "TATU_ENV_FILE": str(path)}, as_systemd_sets):
        proc = subprocess.run([sys.executable, "-m", "tatu.daemon", "--instance", "run5"],
                              env={**clean_environ(), **env}, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 78
        assert proc.stderr.strip().endswith(f"{path}:4: unknown variable SFTGE (did you mean SFT_GE?)"), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config"]  # nothing written


def test_units_install_refuses_a_typo_before_installing_anything(tmp_path, capsys):
    path = _env_file(tmp_path, "TATU_LRR=0.1")
    dest, env_dest = tmp_path / "units", tmp_path / "env"
    assert tatu(["units", "install", "--run", "run5", "--env-file", str(path), "--dest", str(dest),
                 "--env-dest", str(env_dest), "--no-reload"]) == 78
    assert capsys.readouterr().err.splitlines() == [f"tatu units install: {path}:3: unknown variable TATU_LRR (did you mean TATU_LR?)"]
    assert not dest.exists() and not env_dest.exists()


def test_the_shipped_env_files_hold_only_tatus_variables():
    from tatu.ops.units import units_dir

    shipped = sorted((units_dir() / "runs").glob("*.env"))
    assert [p.name for p in shipped] == ["example.env", "run5.env"]
    for path in shipped:
        check_env_file(path)


def test_torchruns_own_options_pass_in_an_env_file_and_a_misspelled_one_is_refused(tmp_path):
    """The DDP unit's env file carries torchrun's PET_* options (units/tatu-sft-ddp@.service);
    torchrun ignores a PET_ name it does not know, so a misspelled one would silently run 1 rank."""
    for line in ("PET_NPROC_PER_NODE=2", "PET_RDZV_ENDPOINT=host0:29400", "PET_NNODES=2"):
        check_env_file(_env_file(tmp_path, line))
    path = _env_file(tmp_path, "PET_NPROC_PER_NOD=2")
    with pytest.raises(ConfigError) as info:
        check_env_file(path)
    assert str(info.value) == f"{path}:3: PET_NPROC_PER_NOD is not one of torchrun's options (did you mean PET_NPROC_PER_NODE?)"

"""A command tatu prints as a next step works when pasted, on the demo's own runs (issue 33 §3).

The commands are collected from the code that prints them, called with the demo's own run names
and env files (tatu.ops.demo's plan, its trunk's variables, the env file the sweep's foreground
backend writes for each member): what every run's verdict, run.log, status and report say about
run-to-run variation (tatu.daemon.ci_covers), what `tatu sweep plan --env-file` prints next, and
the demo's closing `Next:` lines. A long command (`tatu sweep start`) is checked through `tatu
sweep plan` with the same arguments, which loads and validates the same plan without training."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from run_records import set_summary
from sweep_world import stand_in_inputs
from tiny_world import clean_environ, sft_env
from tatu.daemon.ci_covers import ci_covers, run_env_file
from tatu.daemon.config import load_config
from tatu.daemon.judge import RULER, best_set
from tatu.envfile import parse_env_file_lines
from tatu.ops.cli import main as tatu
from tatu.ops.demo import SCALES, SWEEP, sweep_plan, trunk_env, where_things_are, write_run_env
from tatu.sweep.run.backends import ForegroundBackend, member_env, write_private
from tatu.envfile import env_file_text
from tatu.sweep.plan.load import load_plan

ROOT = Path(__file__).resolve().parents[2]  # the repository root, where a person pastes what tatu prints
TICKED = re.compile(r"`(tatu [^`]+)`")
MEASURES = re.compile(r"\((tatu [^()]+) measures it\)")


def _printed(text: str) -> list[str]:
    """The tatu commands in a line of output: `ticked` ones and the ci_covers '(CMD measures it)'."""
    return TICKED.findall(text) + MEASURES.findall(text)


@pytest.fixture
def demo(tmp_path, monkeypatch) -> dict:
    """The demo's directory as `python -m tatu.ops.demo --scale tiny` lays it out before training:
    its plan (ops.demo.sweep_plan), the trunk's env file (ops.demo.write_run_env), and each member's
    env file as the foreground backend writes it (sweeps/demo-replay/env/<run>.env). The data and the
    trunk's checkpoint are empty directories: nothing here trains."""
    out = tmp_path / "demo"
    stand_in_inputs(out / "data", out / "runs" / "trunk" / "final")
    scale = SCALES["tiny"]
    common = {"TATU_DATA": str(out / "data"), "TATU_OUT": str(out / "runs"), "TATU_DEVICE": "cpu", "TATU_SEED": "0",
              "TATU_MICRO_BATCH": str(scale.micro_batch), "TATU_SEQ_LEN": str(scale.seq_len),
              "EVAL_EVERY": str(scale.eval_every), "TATU_EVAL_RESAMPLES": str(scale.resamples),
              "TATU_MEM_FLOOR_MB": "0", "TATU_PRECISION": "fp32"}
    trunk = write_run_env(trunk_env(scale, common))
    plan_file = out / "demo-plan.toml"
    plan_file.write_text(sweep_plan(scale, common))
    sweep_dir = out / "sweeps" / SWEEP
    backend = ForegroundBackend(sweep_dir)
    members = {}
    for member in load_plan(plan_file).compare_members(sweep_dir / "runs", None):
        write_private(backend.env_path(member), env_file_text(member_env(member, None)))
        members[member.run] = backend.env_path(member)
    monkeypatch.chdir(tmp_path)  # elsewhere than the demo: the printed paths are absolute
    return {"out": out, "trunk": trunk, "members": members, "sweep_dir": sweep_dir}


def _advice(env_path: Path) -> tuple[str, str]:
    """(the run's name, what its verdict says its CIs cover) as the daemon writes it for a run
    started with `tatu run --env-file env_path`."""
    env = {key: value for key, (value, _) in parse_env_file_lines(env_path).items()}
    config, _ = load_config(env)
    sets = {name: set_summary(n_lines=40) for name in (best_set(config.mode), RULER)}
    return config.run, ci_covers(sets, list(sets), config, run_env_file(None, env_path)).text


def test_the_demo_members_run_names_are_not_configuration_names(demo):
    # what makes the advice worth testing: the members' TATU_RUN is <sweep>.<member>
    assert "demo-replay.replay-pt-en-s1" in demo["members"] and len(demo["members"]) == 9


def _lone_copy(member_env: Path, runs: Path) -> Path:
    """A member's configuration, its name included, as a run of its own (`tatu run --env-file` outside
    any sweep: its TATU_OUT is not the sweep's runs/)."""
    env = {key: value for key, (value, _) in parse_env_file_lines(member_env).items()}
    env.update(TATU_OUT=str(runs))
    path = runs / f"{env['TATU_RUN']}.env"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(env_file_text(env))
    return path


def test_every_runs_run_to_run_advice_runs_as_printed(demo, capsys):
    """The demo's trunk prints no command; each member, already one seed of the demo's sweep, names that
    sweep's report (its members' folders are SWEEPS/NAME/runs/NAME.MEMBER: the layout the daemon reads
    membership from); the same configuration run alone names the seeds sweep that measures it, and
    `tatu sweep plan` accepts that command's arguments."""
    sweeps, lone = [], [_lone_copy(path, demo["out"] / "runs") for path in demo["members"].values()]
    for env_path in [demo["trunk"], *demo["members"].values(), *lone]:
        run, text = _advice(env_path)
        commands = _printed(text)
        if run == "trunk":  # a pretrain run: a seeds sweep judges an SFT run's criteria, so none is printed
            assert commands == [] and "run-to-run variation not included" in text
            continue
        if env_path in demo["members"].values():  # one seed of the demo's sweep: its report, not a new seeds sweep
            assert commands == [f"tatu sweep report {SWEEP} --sweeps {demo['out'] / 'sweeps'}"], text
            assert demo["out"] / "sweeps" / SWEEP == demo["sweep_dir"] == (demo["sweep_dir"] / "runs" / run).parent.parent
            assert load_plan(demo["out"] / "demo-plan.toml").name == SWEEP
            continue
        assert commands == [f"tatu sweep start --env-file {env_path} --seeds 3"], text
        argv = shlex.split(commands[0])[1:]
        assert argv[:2] == ["sweep", "start"]
        assert tatu(["sweep", "plan", *argv[2:]]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        name = out.split()[1]  # "sweep NAME  plan hash ..."
        said = [line for line in out.splitlines() if line.startswith(f"TATU_RUN={run} ({env_path}:")]
        assert len(said) == 1 and said[0].endswith(f", the sweep {name}"), out
        sweeps.append(name)
        # what it says next: "generated from FILE: `tatu sweep start` writes it to PATH" (the same arguments)
        generated = [line for line in out.splitlines() if line.startswith("generated from ")]
        assert len(generated) == 1 and _printed(generated[0]) == ["tatu sweep start"], out
    assert len(set(sweeps)) == len(lone) == len(demo["members"])  # one sweep per run


def test_the_demos_next_lines_name_what_the_demo_made(demo, capsys):
    out, sweep_dir = demo["out"], demo["sweep_dir"]
    members = sorted(sweep_dir / "runs" / run for run in demo["members"])
    text = where_things_are(out, out / "data", out / "runs" / "trunk" / "final", sweep_dir,
                            sweep_dir / "report" / "index.html", members)
    lines = text.split("Next:\n", 1)[1].splitlines()
    commands = [shlex.split(line, comments=True) for line in lines]
    assert [c[:2] for c in commands] == [["tatu", "sweep"], ["tatu", "generate"], ["tatu", "smoke"]]
    report, generate, smoke = commands
    # the sweep the plan names, in the sweeps dir it was written to
    assert report[2:] == ["report", SWEEP, "--sweeps", str(out / "sweeps")] and load_plan(out / "demo-plan.toml").name == SWEEP
    assert Path(generate[2]) == members[-1] / "final"
    # the trunk's env file: the one the demo wrote, which `tatu smoke` reads (refusing one it cannot)
    assert smoke[2:] == ["--env-file", str(demo["trunk"])]


def test_the_demos_smoke_line_runs_on_its_trunk_env_file(tiny_trunk, tmp_path, monkeypatch, capsys):
    """`tatu smoke --env-file .../runs/trunk.env`, as the demo's Next: prints it, on the demo's own
    trunk variables (tiny scale) over the tiny world's data: the 2-step check runs."""
    scale = SCALES["tiny"]
    out = tmp_path / "demo"
    common = {"TATU_DATA": str(tiny_trunk["data"]), "TATU_OUT": str(out / "runs"), "TATU_DEVICE": "cpu", "TATU_SEED": "0",
              "TATU_MICRO_BATCH": str(scale.micro_batch), "TATU_SEQ_LEN": str(scale.seq_len),
              "EVAL_EVERY": str(scale.eval_every), "TATU_EVAL_RESAMPLES": str(scale.resamples),
              "TATU_MEM_FLOOR_MB": "0", "TATU_PRECISION": "fp32"}
    write_run_env(trunk_env(scale, common))
    members = [out / "sweeps" / SWEEP / "runs" / "m"]
    text = where_things_are(out, tiny_trunk["data"], out / "runs" / "trunk" / "final", out / "sweeps" / SWEEP,
                            out / "page.html", members)
    smoke = [shlex.split(line, comments=True) for line in text.split("Next:\n", 1)[1].splitlines()][-1]
    assert smoke[:2] == ["tatu", "smoke"]
    monkeypatch.chdir(tmp_path)
    assert tatu(smoke[1:]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("scale_name", sorted(SCALES))
def test_the_demos_env_file_writes_numbers_as_a_person_would_and_says_what_ran(tmp_path, scale_name):
    """demo/runs/trunk.env once said TATU_MIN_LR=0.00030000000000000003 (3e-3 / 10 as a float's 17
    digits): the file now holds 0.0003, and the run gets the same string (trunk_env's values)."""
    scale = SCALES[scale_name]
    env = trunk_env(scale, {"TATU_DATA": "data", "TATU_OUT": str(tmp_path / "runs")})
    path = write_run_env(env)
    written = {key: value for key, (value, _) in parse_env_file_lines(path).items()}
    assert written == env  # what ran is what the file says
    # the scales' own numbers, as a person writes them (tiny: 3e-3 to 3e-4; demo: 5e-3 to 1e-4)
    assert (written["TATU_LR"], written["TATU_MIN_LR"]) == {"tiny": ("0.003", "0.0003"), "demo": ("0.005", "0.0001")}[scale_name]
    for key, value in written.items():
        try:
            float(value)
        except ValueError:
            continue
        mantissa = value.lower().split("e")[0].lstrip("-").replace(".", "").strip("0")
        assert len(mantissa) <= 6, f"{key}={value}"  # the demo's numbers are short ones


def test_generate_on_a_run_dir_names_its_checkpoints_and_the_named_one_generates(tiny_trunk, monkeypatch, capsys):
    """`tatu generate runs/trunk` (a run's directory) and `tatu generate tokenizer.json`: one line each,
    exit 65 (bad data), no traceback; the checkpoint the first names generates when pasted."""
    monkeypatch.chdir(tiny_trunk["root"])
    assert tatu(["generate", "runs/trunk", "--prompt", "o"]) == 65
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("tatu generate: runs/trunk: not a checkpoint"), err
    named = err[0].split(": ")[-1].split(", ")
    assert "runs/trunk/final" in named and "runs/trunk/best" in named
    assert tatu(["generate", "runs/trunk/final", "--prompt", "o", "--max-new-tokens", "2"]) == 0
    capsys.readouterr()
    assert tatu(["generate", "tokenizer.json", "--prompt", "o"]) == 65
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("tatu generate: tokenizer.json: not a checkpoint (a JSON file); "), err


def _runs_as_printed(command: str, capsys) -> None:
    """`command` run in-process in the current directory; a long `tatu sweep start` through `tatu sweep
    plan` with the same arguments (it loads and checks the same plan without training)."""
    argv = shlex.split(command)
    assert argv[0] == "tatu", command
    if argv[1:3] == ["sweep", "start"]:
        argv = ["tatu", "sweep", "plan", *argv[3:]]
    assert tatu(argv[1:]) == 0, (command, capsys.readouterr().err)
    capsys.readouterr()


def test_what_a_smoke_a_run_and_tatu_status_print_runs_as_printed_from_the_repository_root(
        tiny_trunk, tmp_path, monkeypatch, capsys):
    """`tatu smoke --env-file F` (a run, 2 steps) from the repository root: every command in what it
    prints and in its run.log runs there as printed; then `tatu status` on it, by name and listing
    every run. (A stopped run's resume command: tests/ops/test_status_after_run.py runs it from here.)"""
    env_file = tmp_path / "pasted.env"
    runs = tmp_path / "runs"
    env = sft_env(tiny_trunk, runs)
    del env["TATU_RUN"]  # the instance names it, as units/runs/example.env says
    env_file.write_text(env_file_text(env))
    config_home = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    before = sorted(p.name for p in ROOT.iterdir())
    proc = subprocess.run([sys.executable, "-m", "tatu.ops.cli", "smoke", "--env-file", str(env_file)], cwd=ROOT,
                          env={**clean_environ(), **config_home}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = runs / "pasted-smoke"
    printed = {c for text in (proc.stdout, proc.stderr, (run_dir / "run.log").read_text()) for c in _printed(text)}
    status = [subprocess.run([sys.executable, "-m", "tatu.ops.cli", "status", *argv], cwd=ROOT,
                             env={**clean_environ(), **config_home}, capture_output=True, text=True, timeout=120)
              for argv in (["pasted-smoke", "--out", str(runs)], [str(run_dir)], ["--out", str(runs)])]
    assert [s.returncode for s in status] == [0, 0, 0], [s.stderr for s in status]
    assert status[0].stdout.startswith("pasted-smoke  finished at step 2/2 (exit 0)")  # a smoke: 2 steps
    assert status[2].stdout.split()[:3] == ["pasted-smoke", "finished", "step"]
    said = {c for s in status for c in _printed(s.stdout)}
    assert printed == said == {f"tatu sweep start --env-file {env_file} --seeds 3"}, (printed, said)
    monkeypatch.chdir(ROOT)
    for command in sorted(printed | said):
        _runs_as_printed(command, capsys)
    assert sorted(p.name for p in ROOT.iterdir()) == before  # nothing was written where they were pasted


def test_what_a_sweep_prints_runs_as_printed_from_the_repository_root(tiny_trunk, tmp_path, monkeypatch, capsys):
    """A 2-member foreground sweep started from the repository root with `--sweeps` elsewhere (as `make
    demo` does with demo/sweeps): the coordinator's closing line, `tatu sweep status` and `tatu sweep
    stop` name commands that find that sweep when pasted there (once they named `tatu sweep report
    NAME` alone, which looks in ./sweeps: exit 78); the tables name each member by its folder
    under runs/."""
    from sweep_world import plan_text

    plan = tmp_path / "pasted.toml"
    plan.write_text(plan_text("pasted", tiny_trunk["data"], tiny_trunk["trunk"], seeds=(1,), replay=(0, 2), steps=2))
    sweeps = tmp_path / "elsewhere"
    before = sorted(p.name for p in ROOT.iterdir())

    def tatu_here(*argv: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "tatu.ops.cli", *argv], cwd=ROOT, env=clean_environ(),
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc

    start = tatu_here("sweep", "start", str(plan), "--foreground", "-K", "2", "--poll", "0.3", "--sweeps", str(sweeps))
    status = tatu_here("sweep", "status", "pasted", "--sweeps", str(sweeps))
    again = tatu_here("sweep", "start", str(plan), "--foreground", "--sweeps", str(sweeps))  # "already finished"
    report = tatu_here("sweep", "report", "pasted", "--sweeps", str(sweeps))
    last = start.stdout.strip().splitlines()[-1]
    assert _printed(last) == [f"tatu sweep report pasted --sweeps {sweeps}"], last
    assert _printed(again.stdout) == [f"tatu sweep report pasted --sweeps {sweeps}"], again.stdout
    runs = sweeps / "pasted" / "runs"
    rows = [line.split()[0] for line in status.stdout.splitlines()[1:] if line.startswith("  ")]
    assert sorted(rows) == sorted(p.name for p in runs.iterdir() if p.is_dir()) == ["pasted.replay-n0-s1", "pasted.replay-n2-s1"]
    named = json.loads((Path(report.stdout.split("report: ")[-1].split()[0]).parent / "report.json").read_text())
    members = sorted(r["member"] for c in named["compare"]["configs"] for r in c["results"])
    assert members == sorted(rows), members  # report.json and the tables: the folders' names
    monkeypatch.chdir(ROOT)
    for command in sorted(set(_printed(start.stdout) + _printed(again.stdout))):
        _runs_as_printed(command, capsys)
    assert sorted(p.name for p in ROOT.iterdir()) == before  # nothing was written where they were pasted

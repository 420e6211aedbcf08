"""`tatu status` after the run (issue 44 item 2): with no daemon answering, what the run's directory
says happened, exit 0, in text and --json: finished with its verdict, aborted and why, stopped with
the command that resumes it (run here as printed, from the repository root); a run that never
existed is one line and exit 1 (README, exit codes: `tatu status`, no daemon answers); with no run
named, every run tatu knows and its state. The live path is tests/daemon/test_control_socket.py's."""
from __future__ import annotations

import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_world import base_env, clean_environ, sft_env, wait_for

from tatu.daemon.config import load_config
from tatu.daemon.run.lock import holder_pid
from tatu.daemon.run.view import Started, read_run
from tatu.daemon.run.paths import RunDir
from tatu.envfile import env_file_text
from tatu.ops.cli import main as tatu
from tatu.ops.status_files import next_command

ROOT = Path(__file__).resolve().parents[2]  # the repository root: where a person pastes what tatu prints


def _run(argv: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tatu.ops.cli", *argv], env={**clean_environ(), **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(tiny_trunk, tmp_path_factory):
    """Three ended runs from the session's trunk, each started as an operator would:
    `done` (tatu run --env-file, TATU_OUT=demo/runs relative to its directory, 3 steps, a verdict),
    `forget` (aborted by MIX_FORGET_LIMIT, exit 10), `paused` (TATU_OUT=runs relative, stopped by
    SIGTERM after its first save, far from its limit)."""
    root = tmp_path_factory.mktemp("after")
    work = root / "work"
    work.mkdir()
    env = {"XDG_CONFIG_HOME": str(root / "config")}
    files = {}

    def env_file(name: str, **settings) -> Path:
        path = work / f"{name}.env"
        path.write_text(env_file_text(sft_env(tiny_trunk, Path("unused"), TATU_RUN=name, **settings)))
        files[name] = path
        return path

    done = env_file("done", TATU_OUT="demo/runs", MIX_STEPS_LIMIT=3)
    assert _run(["run", "--env-file", str(done)], env, work).returncode == 0
    forget = env_file("forget", TATU_OUT=str(work / "runs"), REPLAY_N=0, TATU_LR="3e-2", MIX_FORGET_LIMIT="0.02",
                      MIX_STEPS_LIMIT=30, EVAL_EVERY=2, TATU_GRAD_CLIP=0)
    proc = _run(["run", "--env-file", str(forget)], env, work)
    assert proc.returncode == 10, proc.stderr[-2000:]
    paused = env_file("paused", TATU_OUT="runs", MIX_STEPS_LIMIT=100_000, EVAL_EVERY=50_000, TATU_CKPT_EVERY=2)
    child = subprocess.Popen([sys.executable, "-m", "tatu.ops.cli", "run", "--env-file", str(paused)],
                             env={**clean_environ(), **env}, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    try:
        wait_for(lambda: RunDir(work / "runs" / "paused").events("checkpoint"), 300, "paused's first save")
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=300) == 0, child.stderr.read()[-2000:]
    finally:
        if child.poll() is None:
            child.kill()
    return {"root": root, "work": work, "env": env, "files": files,
            "dirs": {"done": work / "demo" / "runs" / "done", "forget": work / "runs" / "forget",
                     "paused": work / "runs" / "paused"}}


def _status(runs, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return _run(["status", *argv], runs["env"], cwd)


def test_a_finished_run_says_its_step_verdict_and_reason(runs):
    """Asked where `make demo` would be asked (its demo/runs/ under the current directory), by name."""
    proc = _status(runs, "done", cwd=runs["work"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    verdict_file = runs["dirs"]["done"] / "verdict.json"
    assert lines[0] == f"done  finished at step 3/3 (exit 0): its verdict is in {verdict_file}"
    saved = json.loads(verdict_file.read_text())
    logged = [line for line in (runs["dirs"]["done"] / "run.log").read_text().splitlines() if "VERDICT" in line][-1]
    assert lines[1] == "verdict " + saved["line"].removesuffix("; " + saved["ci_covers"]["text"])
    assert lines[1].removeprefix("verdict ") in logged and lines[1].startswith(f"verdict VERDICT {saved['verdict']}: ")
    assert lines[2] == f"covers  {saved['ci_covers']['text']}"
    assert lines[-1] == f"run dir {runs['dirs']['done']}  (weights: final/ and best/)"
    shown = json.loads(_status(runs, "done", "--json", cwd=runs["work"]).stdout)
    assert (shown["state"], shown["step"], shown["limit"], shown["code"]) == ("finished", 3, 3, 0)
    assert shown["verdict"]["verdict"] == saved["verdict"] and shown["next"] is None


def test_an_aborted_run_says_why_and_that_it_is_final(runs):
    proc = _status(runs, "forget", "--out", str(runs["work"] / "runs"), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    aborts = RunDir(runs["dirs"]["forget"]).events("abort")
    step, reason = aborts[-1]["step"], aborts[-1]["reason"]
    assert lines[0] == f"forget  aborted at step {step}/30 (exit 10): {reason}"
    assert "MIX_FORGET_LIMIT 2.0%" in reason
    assert lines[1].startswith("verdict VERDICT forgets: ")
    assert "next    an abort by MIX_FORGET_LIMIT is final (a restart exits 10 again): start a new TATU_RUN" in lines
    shown = json.loads(_status(runs, str(runs["dirs"]["forget"]), "--json", cwd=ROOT).stdout)  # a run dir's path
    assert (shown["state"], shown["code"], shown["reason"], shown["next"]) == ("aborted", 10, reason, None)


def test_a_stopped_run_is_resumed_by_the_command_it_prints_pasted_at_the_repository_root(runs):
    paused = runs["dirs"]["paused"]
    saved = RunDir(paused).events("checkpoint")[-1]["step"]
    trained = max(e["step"] for e in RunDir(paused).events("step"))
    proc = _status(runs, str(paused), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"paused  stopped at step {trained}/100000, its resume state saved at step {saved}: resumable"
    # TATU_OUT=runs was relative to where it ran: the command goes there first
    command = f"cd {runs['work']} && tatu run --env-file {runs['files']['paused']}"
    assert f"resume  {command}" in lines
    assert json.loads(_status(runs, str(paused), "--json", cwd=ROOT).stdout)["next"] == command
    # pasted at the repository root, it resumes the run from its saved step (then stopped again)
    resumed = len(RunDir(paused).events("resumed"))
    environ = clean_environ()
    path = f"{Path(sys.executable).parent}:{environ.get('PATH', '')}"  # the checkout's `tatu`, as after `make demo`
    shell = subprocess.Popen(command, shell=True, cwd=ROOT, env={**environ, **runs["env"], "PATH": path},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(RunDir(paused).events("resumed")) > resumed or shell.poll() is not None, 300, "the resume")
        assert shell.poll() is None, shell.stderr.read()[-2000:]
        assert RunDir(paused).events("resumed")[-1]["step"] == saved
        daemon = wait_for(lambda: holder_pid(paused), 60, "the resumed daemon's lock")
        os.kill(daemon, signal.SIGTERM)  # the shell's child: it saves and exits 0, and so does the shell
        assert shell.wait(timeout=300) == 0, shell.stderr.read()[-2000:]
    finally:
        if shell.poll() is None:
            shell.kill()


def test_a_run_that_never_existed_is_one_line_and_exit_1(runs):
    proc = _status(runs, "nosuchrun", cwd=runs["work"])
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tatu status: no run nosuchrun: no daemon answers at ")
    assert f"no run directory nosuchrun in {runs['work'] / 'runs'}, {runs['work'] / 'demo' / 'runs'}" in lines[0]


def test_tatu_status_lists_the_runs_it_knows_and_their_states(runs):
    proc = _status(runs, cwd=runs["work"])
    assert proc.returncode == 0, proc.stderr
    *rows, looked = proc.stdout.splitlines()
    verdict = json.loads((runs["dirs"]["done"] / "verdict.json").read_text())["verdict"]
    forget_step = RunDir(runs["dirs"]["forget"]).events("abort")[-1]["step"]
    paused_step = max(e["step"] for e in RunDir(runs["dirs"]["paused"]).events("step"))
    assert [row.split() for row in rows] == [
        ["forget", "aborted", "step", f"{forget_step}/30", "forgets", str(runs["dirs"]["forget"])],
        ["paused", "stopped", "step", f"{paused_step}/100000", str(runs["dirs"]["paused"])],
        ["done", "finished", "step", "3/3", verdict, str(runs["dirs"]["done"])]]  # runs/ first, then demo/runs/
    assert looked == (f"(looked in {runs['work'] / 'runs'} (TATU_OUT's default), {runs['work'] / 'demo' / 'runs'} "
                      "(make demo's); named, a run says more)")
    listed = json.loads(_status(runs, "--json", cwd=runs["work"]).stdout)
    assert {r["run"]: r["state"] for r in listed["runs"]} == {"done": "finished", "forget": "aborted", "paused": "stopped"}


def test_a_units_run_is_found_through_its_installed_env_file(runs, tmp_path):
    """The operator's way: `tatu units install` put the env file in %E/tatu and the units' working
    directory in the unit; `tatu status forget` from anywhere finds the run's directory there."""
    forget = runs["files"]["forget"]
    text = forget.read_text().replace(f"TATU_OUT={runs['work'] / 'runs'}", "TATU_OUT=runs")
    config = runs["root"] / "config"
    env = {"XDG_CONFIG_HOME": str(config)}
    proc = _run(["units", "install", "--run", "forget", "--env-file", str(forget), "--workdir", str(runs["work"]),
                 "--no-reload", "--force-env"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    (config / "tatu" / "forget.env").write_text(text)  # relative to the units' WorkingDirectory
    proc = _run(["status", "forget"], env, tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("forget  aborted at step "), proc.stdout + proc.stderr


def test_a_run_started_from_a_shells_variables_resumes_with_them_as_set_flags(tmp_path):
    """No env file to name: the printed `tatu run --set ...` gives back the same configuration (its
    defaults left out), checked by reading the flags back as the daemon reads its configuration."""
    config = load_config(base_env(tmp_path / "data", tmp_path / "runs", TATU_RUN="shell", TATU_SEED_CKPT="seed.pt",
                                  TATU_LR="0.001", MIX_FORGET_CI="1", EVAL_EN_ALL="0"))[0].to_json()
    run_dir = tmp_path / "runs" / "shell"
    (run_dir / "state").mkdir(parents=True)
    (run_dir / "events.jsonl").write_text(json.dumps({"event": "config", "step": 0, "config": config,
                                                      "origins": {"TATU_RUN": "env"}, "ranks": 1}) + "\n")
    outcome = read_run(run_dir)
    assert outcome.state == "stopped" and outcome.started == Started("env", config, None, 1)
    command = next_command(outcome, tmp_path)
    argv = shlex.split(command)
    assert argv[:2] == ["tatu", "run"] and "--set" in argv and "--env-file" not in argv
    flags = dict(a.split("=", 1) for a in argv[3::2])
    assert load_config(flags)[0].to_json() == config
    assert {"TATU_LR=0.001", "MIX_FORGET_CI=1", "EVAL_EN_ALL=0", "TATU_RUN=shell"} <= set(argv)
    assert not [a for a in argv if a.startswith(("SFT_GE=", "EVAL_EVERY="))]  # defaults are left to be defaults
    # under a unit: the unit; on several ranks under it: the DDP unit
    for by, ranks, said in (("instance", 1, "systemctl --user start tatu-sft@shell"),
                            ("instance", 2, "systemctl --user start tatu-sft-ddp@shell")):
        (run_dir / "events.jsonl").write_text(json.dumps({"event": "config", "step": 0, "config": config,
                                                          "origins": {"TATU_RUN": by}, "ranks": ranks}) + "\n")
        assert next_command(read_run(run_dir), tmp_path) == said


def test_a_sweep_member_is_found_by_its_folders_name_and_points_to_its_sweep(tmp_path, monkeypatch):
    """`make demo`'s members live in demo/sweeps/NAME/runs/NAME.MEMBER: `tatu status NAME.MEMBER` finds
    one there, and a stopped one is resumed by its sweep, not by a command of its own."""
    sweeps = tmp_path / "demo" / "sweeps"
    run_dir = sweeps / "demo-replay" / "runs" / "demo-replay.replay-n0-s1"
    (run_dir / "state").mkdir(parents=True)
    config = load_config(base_env(tmp_path / "data", run_dir.parent, TATU_RUN=run_dir.name, TATU_SEED_CKPT="s"))[0]
    (run_dir / "events.jsonl").write_text(json.dumps({"event": "config", "step": 0, "config": config.to_json(),
                                                      "origins": {"TATU_RUN": "env"}, "ranks": 1}) + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("TATU_OUT", raising=False)
    proc = _run(["status", run_dir.name], {"XDG_CONFIG_HOME": str(tmp_path / "config")}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == [f"{run_dir.name}  stopped at step 0/200: resumable",
                                            f"sweep   tatu sweep status demo-replay --sweeps {sweeps}"]


def test_a_run_directory_of_the_first_format_reads_as_finished():
    """tests/fixtures/run-v1, what tatu wrote before records had versions: `tatu status` reads it too."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "run-v1"
    outcome = read_run(fixture)
    saved = json.loads((fixture / "verdict.json").read_text())
    assert (outcome.state, outcome.step, outcome.limit, outcome.code) == ("finished", 4, 4, 0)
    assert outcome.verdict.outcome == saved["verdict"] == "holds" and outcome.started.ranks == 1
    assert outcome.reason == saved["line"].removesuffix("; " + saved["ci_covers"]["text"])


def _events(run_dir: Path, *events: dict) -> None:
    config = load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", "MIX_STEPS_LIMIT": "40"})[0].to_json()
    records = [{"event": "config", "step": 0, "config": config, "origins": {"TATU_RUN": "env"}}, *events]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_states_a_run_directory_shows_without_a_verdict(tmp_path):
    """A non-finite abort (exit 11: diverged) until the run starts again; a stop before the baseline; a daemon
    that holds the directory (here this process's flock, as the daemon's run/lock.py takes it)."""
    nan = tmp_path / "nan"
    (nan / "state").mkdir(parents=True)
    _events(nan, {"event": "ready", "step": 0}, {"event": "step", "step": 7}, {"event": "checkpoint", "step": 5},
            {"event": "abort", "step": 8, "reason": "non-finite loss"})
    outcome = read_run(nan)
    assert (outcome.state, outcome.code, outcome.step, outcome.saved_step) == ("diverged", 11, 7, 5)
    assert outcome.reason == "non-finite loss at step 8"
    _events(nan, {"event": "abort", "step": 8, "reason": "non-finite loss"}, {"event": "resumed", "step": 5})
    assert read_run(nan).state == "stopped"  # started again from its saved state: not an end
    # by the end's exit code, never its words: a contract exit the daemon logged (65, 78) is fatal
    _events(nan, {"event": "ready", "step": 0}, {"event": "exit", "code": 65, "reason": "eval set sftHeld: bad line 3"})
    outcome = read_run(nan)
    assert (outcome.state, outcome.code, outcome.reason) == ("fatal", 65, "eval set sftHeld: bad line 3 at step 0")
    # a forget abort logged and its verdict not yet written says exit 10, not a non-finite 11
    _events(nan, {"event": "ready", "step": 0}, {"event": "abort", "step": 4, "reason": "drift +40%", "code": 10})
    assert (read_run(nan).state, read_run(nan).code) == ("aborted", 10)
    early = tmp_path / "early"
    _events(early)
    assert read_run(early).state == "not started"
    held = tmp_path / "held"
    _events(held, {"event": "ready", "step": 0})
    fd = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        outcome = read_run(held)
        assert (outcome.state, outcome.holder) == ("running", os.getpid())
    finally:
        os.close(fd)
    assert read_run(held).state == "not started"

"""What a single run's CIs cover (tatu.daemon.ci_covers): the wording, the env file it names, and
that a real run says it in run.log, verdict.json, `tatu status` (text and --json) and the report,
with the line counts of the eval files it read."""
from __future__ import annotations

import html
import io
import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from run_records import set_summary
from tiny_world import RUN_PREFIXES, clean_environ, sft_env, wait_for

from tatu.daemon.ci_covers import ENV_FILE_PLACEHOLDER, ci_covers, run_env_file, run_to_run_sources
from tatu.daemon.config import load_config

SFT = {"TATU_DATA": "d", "TATU_SEED_CKPT": "seed"}


def _sets(**lines) -> dict:
    """An eval record's `sets` summaries: name=(scored, total)."""
    return {name: set_summary(n_lines=scored, n_lines_total=total) for name, (scored, total) in lines.items()}


def _config(**variables):
    return load_config({**SFT, **variables})[0]


def test_the_wording_counts_each_sets_lines_and_names_the_command():
    config = _config()
    sets = _sets(sftHeld=(100, 100), enRuler=(166, 166), ptVal=(64, 390))
    two = ci_covers(sets, ("sftHeld", "enRuler"), config, "/home/op/.config/tatu/run5.env")
    assert two.text == ("CIs over the 100 sftHeld and 166 enRuler lines; run-to-run variation not included "
                        "(tatu sweep start --env-file /home/op/.config/tatu/run5.env --seeds 3 measures it)")
    one = ci_covers(sets, ("enRuler",), config, None)
    assert one.text == ("CI over the 166 enRuler lines; run-to-run variation not included "
                        f"(tatu sweep start --env-file {ENV_FILE_PLACEHOLDER} --seeds 3 measures it)")
    # a subsampled set says how many of its lines the CI resamples; the order is the caller's
    three = ci_covers(sets, ("ptVal", "sftHeld", "enRuler"), config, None)
    assert three.text.startswith("CIs over the 64 of 390 ptVal, 100 sftHeld and 166 enRuler lines; ")
    assert ci_covers(_sets(enRuler=(1, 1)), ("enRuler",), config, None).text.startswith("CI over the 1 enRuler line; ")
    record = two.to_json()
    assert record["lines"] == {"sftHeld": 100, "enRuler": 166} and record["lines_total"]["enRuler"] == 166
    assert record["env_file"] == "/home/op/.config/tatu/run5.env" and record["measured_by"] in record["text"]
    assert record["not_included"] == ["data order", "float summation order (threads, kernels, CPU)"]
    assert len(record["text"]) < 200  # one journal line


def test_what_is_not_included_follows_the_configuration():
    assert "adapter init" in run_to_run_sources(_config(TATU_TRAIN="lora"))
    assert "dropout" in run_to_run_sources(_config(TATU_TRAIN="lora", TATU_LORA_DROPOUT="0.1"))
    assert "dropout" in run_to_run_sources(_config(TATU_DROPOUT="0.1"))
    plain = run_to_run_sources(_config())
    assert "dropout" not in plain and "adapter init" not in plain and "weight init" not in plain
    fresh = load_config({"TATU_DATA": "d", "TATU_MODE": "pretrain"})[0]
    assert "weight init" in run_to_run_sources(fresh)


def test_a_sweep_members_cis_point_to_its_sweeps_report_not_to_a_new_seeds_sweep(tmp_path):
    """A member of a sweep (TATU_OUT=SWEEPS/NAME/runs, TATU_RUN=NAME.MEMBER, as the sweep starts it) is
    already one seed of a measurement of run-to-run variation: its verdict names that sweep's report."""
    sweeps = tmp_path / "demo" / "sweeps"
    member = _config(TATU_OUT=str(sweeps / "demo-replay" / "runs"), TATU_RUN="demo-replay.replay-n0-s1")
    covers = ci_covers(_sets(sftHeld=(20, 20), enRuler=(16, 16)), ("sftHeld", "enRuler"), member, "/x/member.env")
    assert covers.text == ("CIs over the 20 sftHeld and 16 enRuler lines; run-to-run variation not included (this "
                           f"run is one seed of the sweep demo-replay: `tatu sweep report demo-replay --sweeps {sweeps}` "
                           "shows it)")
    assert covers.to_json()["measured_by"] == f"tatu sweep report demo-replay --sweeps {sweeps}"
    # not a member: a run named like one elsewhere, a run in a sweep-like folder with another name
    for lone in (_config(TATU_OUT=str(tmp_path / "runs"), TATU_RUN="demo-replay.replay-n0-s1"),
                 _config(TATU_OUT=str(sweeps / "demo-replay" / "runs"), TATU_RUN="run5")):
        assert ci_covers(_sets(enRuler=(16, 16)), ("enRuler",), lone, None).command.startswith("tatu sweep start ")


def test_the_env_file_is_the_one_given_else_the_units_own(tmp_path):
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    assert run_env_file(None, Path("rel.env"), environ) == str(Path("rel.env").absolute())
    assert run_env_file(None, None, environ) is None  # variables from a shell
    assert run_env_file("run5", None, environ) is None  # no such file: not claimed
    unit_env = tmp_path / "config" / "tatu" / "run5.env"
    unit_env.parent.mkdir(parents=True)
    unit_env.write_text("REPLAY_N=2\n")
    assert run_env_file("run5", None, environ) == str(unit_env)  # the unit's EnvironmentFile=%E/tatu/%i.env
    # the units name it themselves, %E expanded by systemd: it wins over this process's XDG_CONFIG_HOME
    named = {**environ, "TATU_ENV_FILE": "/srv/tatu/run5.env"}
    assert run_env_file("run5", None, named) == "/srv/tatu/run5.env"
    assert run_env_file("run5", Path("given.env"), named) == str(Path("given.env").absolute())


# --- a real tiny run ---------------------------------------------------------------------------

def _scored_lines(data: Path, name: str) -> int:
    """The set's lines as the eval file holds them (blank lines are counted, not scored), read here
    independently of tatu's readers."""
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    text = (data / manifest["evals"][name]["file"]).read_text(encoding="utf-8")
    return sum(1 for line in text.split("\n") if line.strip())


@pytest.fixture(scope="module")
def finished(tiny_trunk, tmp_path_factory):
    """A tiny SFT run started as `tatu run --env-file FILE`, to its verdict, with its report."""
    from tatu.ops.cli import main as tatu
    from tatu.ops.report import page as report

    root = tmp_path_factory.mktemp("covers")
    env_file = root / "covers.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in sft_env(tiny_trunk, root, MIX_STEPS_LIMIT=3).items()))
    saved = dict(os.environ)
    try:
        for k in list(os.environ):
            if k.startswith(RUN_PREFIXES):
                del os.environ[k]
        assert tatu(["run", "--env-file", str(env_file)]) == 0
    finally:
        os.environ.clear()
        os.environ.update(saved)
    run = root / "run"
    index = report.build_report([run], root / "report")
    return {"run": run, "env_file": env_file, "index": index, "data": Path(tiny_trunk["data"])}


def test_the_verdict_says_what_its_cis_cover_in_run_log_and_verdict_json(finished):
    held, ruler = _scored_lines(finished["data"], "sftHeld"), _scored_lines(finished["data"], "enRuler")
    expected = (f"CIs over the {held} sftHeld and {ruler} enRuler lines; run-to-run variation not included "
                f"(tatu sweep start --env-file {finished['env_file']} --seeds 3 measures it)")
    verdict = json.loads((finished["run"] / "verdict.json").read_text())
    assert verdict["ci_covers"]["text"] == expected
    assert verdict["ci_covers"]["lines"] == {"sftHeld": held, "enRuler": ruler}
    assert verdict["ci_covers"]["env_file"] == str(finished["env_file"])
    assert verdict["line"].startswith("VERDICT ") and verdict["line"].endswith(f"; {expected}")
    log = (finished["run"] / "run.log").read_text()
    assert [line for line in log.splitlines() if "VERDICT " in line][0].endswith(verdict["line"])
    # the EVAL lines' CIs, said once beside them (every set the eval scored)
    said = [line for line in log.splitlines() if "what each eval's CIs cover: " in line]
    assert len(said) == 1 and f"{held} sftHeld" in said[0] and f"{ruler} enRuler" in said[0]
    assert log.index(said[0]) < log.index("EVAL 0: ")


def test_the_report_says_what_the_cis_cover(finished):
    page = finished["index"].read_text(encoding="utf-8")
    verdict = json.loads((finished["run"] / "verdict.json").read_text())
    events = [json.loads(line) for line in (finished["run"] / "events.jsonl").read_text().splitlines()]
    last_eval = [e for e in events if e["event"] == "eval"][-1]
    lead = page[page.index('<section id="lead">'):page.index("</section>")]  # said once, in the run's sentence
    assert html.escape(verdict["ci_covers"]["text"]) in lead
    comparisons = page[page.index('id="comparisons-covers"'):]
    assert last_eval["ci_covers"]["text"] in comparisons[:comparisons.index("</ul>")]
    assert f"{_scored_lines(finished['data'], 'enRuler')} enRuler" in last_eval["ci_covers"]["text"]


@pytest.mark.slow
def test_tatu_status_of_a_unit_run_says_what_its_cis_cover(tiny_trunk, tmp_path):
    """As under tatu-sft@NAME: `--instance NAME`, the variables from %E/tatu/NAME.env."""
    from tatu.daemon.control.access import socket_path
    from tatu.daemon.control.client import request
    from tatu.ops.status import format_status, status_main

    runtime, config_home = tmp_path / "rt", tmp_path / "config"
    runtime.mkdir(mode=0o700)
    env = sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=100_000, EVAL_EVERY=100_000)
    del env["TATU_RUN"]  # the instance names the run
    unit_env = config_home / "tatu" / "covers.env"
    unit_env.parent.mkdir(parents=True)
    unit_env.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    proc = subprocess.Popen([sys.executable, "-m", "tatu.daemon", "--instance", "covers"],
                            env={**clean_environ(), **env, "RUNTIME_DIRECTORY": str(runtime),
                                 "XDG_CONFIG_HOME": str(config_home)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    path = socket_path("covers", {"RUNTIME_DIRECTORY": str(runtime)})

    def status_with_an_eval():
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        try:
            status = request(path, "status")
        except Exception:  # not listening yet
            return None
        return status if (status.get("last_eval") or {}).get("ci_covers") else None

    try:
        wait_for(status_with_an_eval, 120, "a status reply with the baseline eval", interval=0.2)
        out = io.StringIO()
        assert status_main(Namespace(run=None, socket=str(path), json=True, watch=None, timeout=5.0), out) == 0
        covers = json.loads(out.getvalue())["last_eval"]["ci_covers"]
        ruler = _scored_lines(Path(tiny_trunk["data"]), "enRuler")
        assert covers["env_file"] == str(unit_env) and covers["lines"]["enRuler"] == ruler
        assert f" {ruler} enRuler" in covers["text"] and f"--env-file {unit_env} --seeds 3" in covers["text"]
        assert f"covers  {covers['text']}" in format_status(json.loads(out.getvalue()))
        request(path, "stop")
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

"""`tatu eval` / `tatu compare` on a daemon run's checkpoints give the CIs the daemon logged.

One default for both sides: the CLI bootstraps with the checkpoint's own TATU_SEED and
TATU_EVAL_RESAMPLES, so the numbers in events.jsonl can be re-derived from the shell."""
from __future__ import annotations

import json

import pytest

from tiny_world import base_env, build_world

from tatu.daemon.logs import read_events
from tatu.daemon.main import main as daemon_main
from tatu.ops.cli import main as tatu

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalvsdaemon")
    data = build_world(root)
    runs = root / "runs"
    assert daemon_main(base_env(data, runs, TATU_RUN="trunk", TATU_MODE="pretrain", SFT_GE=2, MIX_STEPS_LIMIT=4,
                                EVAL_EVERY=4, TATU_LR="3e-3", TATU_GEN_PROMPTS=0)) == 0
    # a seed and a resample count other than the defaults: the CLI must find them in the checkpoint
    assert daemon_main(base_env(data, runs, TATU_RUN="sft", TATU_SEED_CKPT=runs / "trunk" / "final", SFT_GE=2,
                                REPLAY_N=1, MIX_STEPS_LIMIT=2, EVAL_EVERY=2, TATU_LR="1e-3", TATU_SEED="4242",
                                TATU_EVAL_RESAMPLES="300", TATU_GEN_PROMPTS=0)) == 0
    last = [e for e in read_events(runs / "sft" / "events.jsonl") if e["event"] == "eval"][-1]
    assert last["step"] == 2
    return {"data": data, "trunk": runs / "trunk" / "final", "final": runs / "sft" / "final", "eval": last}


def test_eval_of_the_final_checkpoint_equals_the_daemons_last_eval(finished_run, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert tatu(["eval", str(finished_run["final"]), "--data", str(finished_run["data"]), "--json", str(out)]) == 0
    assert f"seed 4242 (TATU_SEED of {finished_run['final']}), 300 resamples" in capsys.readouterr().out
    sets = json.loads(out.read_text())["sets"]
    logged = finished_run["eval"]["sets"]
    assert set(logged) <= set(sets)
    for name, daemon_numbers in logged.items():
        cli = sets[name][0]
        assert cli["ppl"] == pytest.approx(daemon_numbers["ppl"], rel=1e-12)
        assert (cli["ci"]["lo"], cli["ci"]["hi"]) == pytest.approx((daemon_numbers["lo"], daemon_numbers["hi"]), rel=1e-12)


def test_compare_seed_vs_final_equals_the_daemons_drift(finished_run, tmp_path):
    """drift at the last eval = enRuler of final/ vs the run's step 0, which scored the seed checkpoint."""
    out = tmp_path / "compare.json"
    assert tatu(["compare", str(finished_run["trunk"]), str(finished_run["final"]), "--data", str(finished_run["data"]),
                 "--json", str(out)]) == 0
    row = json.loads(out.read_text())["sets"]["enRuler"][0]
    drift = finished_run["eval"]["drift"]
    assert row["ratio"] - 1 == pytest.approx(drift["value"], rel=1e-9)
    assert (row["lo"] - 1, row["hi"] - 1) == pytest.approx((drift["lo"], drift["hi"]), rel=1e-9)
    assert row["p_value"] == drift["p_value"] and row["mde"] == pytest.approx(drift["mde"], rel=1e-9)

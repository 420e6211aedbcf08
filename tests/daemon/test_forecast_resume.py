"""A run killed at each moment around a forecasting eval resumes to the very history of a run never
killed: the forecast at step N is made from the same evals whether or not the run restarted.

The kill is simulated in-process, at exact boundaries (tests/daemon/test_daemon.py's sigkill test
strikes at random moments, so a miss there is a dice roll; here every moment is struck every time):
right after the eval at a step (its state not saved yet: the restart evaluates the step again) and
right after the state save at a step (the restart continues after it)."""
from __future__ import annotations

import json

import pytest
from tiny_world import sft_env

from tatu.daemon import loop
from tatu.daemon.main import main as daemon_main

# evals at 4, 8, 12 and 16: forecasts at 8 and 12 (the third and fourth evals; none at the last step).
# A cosine with warmup: the forecast's clock (the cumulative learning rate) comes from the curve's end
# the state stored, so a restart that rebuilt it from anything else would move the forecast.
SETTINGS = dict(MIX_STEPS_LIMIT=16, EVAL_EVERY=4, TATU_CKPT_EVERY=1, TATU_GEN_PROMPTS=0,
                TATU_SCHEDULE="cosine", TATU_WARMUP_STEPS=4, TATU_MIN_LR="1e-5")


class Killed(BaseException):
    """kill -9 at a chosen moment: nothing after it runs (not an Exception, so no handler maps it)."""


def history(run_dir) -> list[dict]:
    saved = json.loads((run_dir / "state" / "resume.json").read_text())
    return [{k: v for k, v in h.items() if k not in ("seconds", "line")} for h in saved["history"]]


@pytest.fixture(scope="module")
def reference(tiny_trunk, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    assert daemon_main(sft_env(tiny_trunk, out, **SETTINGS)) == 0
    return history(out / "run")


@pytest.mark.parametrize("moment,at", [("save", 4), ("eval", 8), ("save", 8), ("save", 11), ("eval", 12), ("save", 12)])
def test_killed_around_a_forecasting_eval_resumes_to_the_same_history(tiny_trunk, tmp_path, monkeypatch, reference,
                                                                        moment, at):
    evaluate, save_if_due = loop._evaluate, loop._save_if_due

    def evaluate_then_die(actions, step):
        code = evaluate(actions, step)
        if moment == "eval" and step == at:
            raise Killed
        return code

    def save_then_die(actions, step, mem):
        save_if_due(actions, step, mem)
        if moment == "save" and step == at:
            raise Killed

    env = sft_env(tiny_trunk, tmp_path, **SETTINGS)
    with monkeypatch.context() as patched:
        patched.setattr(loop, "_evaluate", evaluate_then_die)
        patched.setattr(loop, "_save_if_due", save_then_die)
        with pytest.raises(Killed):
            daemon_main(env)
    saved = json.loads((tmp_path / "run" / "state" / "resume.json").read_text())
    assert saved["step"] == (at - 1 if moment == "eval" else at)  # the moment struck is the one meant
    assert daemon_main(env) == 0
    resumed = history(tmp_path / "run")
    assert [h["step"] for h in resumed] == [0, 4, 8, 12, 16]
    assert [h["step"] for h in resumed if "forecast" in h] == [8, 12]
    assert resumed == reference

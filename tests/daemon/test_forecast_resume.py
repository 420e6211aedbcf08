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


# --- the list of evals a forecast is fitted to, without a run ----------------------------------

N_LINES = 30


def ruler(forgetting: float, seed: int):
    """The ruler scored by a model that forgets: per-line sums over shared line difficulties."""
    import numpy as np

    from tatu.evals.scoring import SetResult

    tokens = np.random.default_rng(0).integers(10, 60, N_LINES)
    difficulty = np.random.default_rng(1).uniform(2.0, 5.0, N_LINES)
    nll = tokens * (difficulty + forgetting + np.random.default_rng(seed).normal(0, 0.02, N_LINES))
    lines = {"index": list(range(N_LINES)), "nll_sum": nll.tolist(), "n_tokens": tokens.tolist(),
             "n_chars": tokens.tolist(), "n_bytes": tokens.tolist()}
    payload = {"name": "enRuler", "kind": "text", "n_lines_total": N_LINES, "lines_sha256": "ruler",
               "lines": lines, "extra": {"file_sha256": None}}
    return {"enRuler": SetResult.from_json(payload, n_resamples=100, seed=0)}


def forecasts(state, steps, limit=40):
    """The forecast at each eval in `steps`, each eval then recorded in the history as the run does."""
    from run_records import eval_record

    from tatu.daemon.config import load_config
    from tatu.daemon.forecast import RunForecaster

    config, _ = load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", "MIX_STEPS_LIMIT": str(limit)})
    forecaster = RunForecaster(config, limit)
    out = {}
    for step in steps:
        out[step] = forecaster.at_eval(step, ruler(0.002 * step, step), state)
        state.history.append(eval_record(step))
    return out


def test_a_state_without_some_evals_lines_forecasts_nothing_rather_than_from_fewer_evals():
    """A restart whose state lacks the lines of an eval its history records (saved by a tatu that kept
    none) must not forecast from the evals after the restart alone: that is another list of evals than
    the uninterrupted run's, so another forecast at the same step. It forecasts nothing instead."""
    from run_records import eval_record

    from tatu.daemon.run.state import RunState

    whole = RunState(step=0, baseline=ruler(0.0, 0), history=[eval_record(0)])
    uninterrupted = forecasts(whole, [4, 8, 12, 16, 20])
    assert [s for s, f in uninterrupted.items() if f is not None] == [8, 12, 16, 20]
    assert uninterrupted[20].n_evals == 6

    # the same run restarted at step 8 from a state that kept no lines: its history has evals 4 and 8
    older = RunState(step=8, baseline=ruler(0.0, 0), history=[eval_record(s) for s in (0, 4, 8)])
    restarted = forecasts(older, [12, 16, 20])
    assert restarted == {12: None, 16: None, 20: None}


def test_the_forecast_is_the_same_from_the_state_as_a_restart_reads_it():
    """The state through its JSON (sorted keys: lines kept as "12", "4", "8") forecasts exactly what
    the live state does: nothing of the process (dict order, earlier forecasts) enters it."""
    import json

    from tatu.daemon.run.state import RunState

    live = RunState(step=0, baseline=ruler(0.0, 0))
    before = forecasts(live, [4, 8, 12])
    live.step = 12
    restored = RunState.from_json(json.loads(json.dumps(live.to_json(), sort_keys=True)), 100, 0)
    assert list(restored.ruler_lines) == [12, 4, 8]
    after = forecasts(restored, [16])
    again = forecasts(live, [16])
    assert after[16] is not None and after[16] == again[16] and after[16].n_evals == 5
    assert before[12].n_evals == 4

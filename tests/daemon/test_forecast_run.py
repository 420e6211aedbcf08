"""The drift forecast through a real (tiny) run: on the EVAL line from the third eval on, in the
eval events and the resume state, and MIX_FORECAST_ABORT=1 ending a run before drift itself
crosses MIX_FORGET_LIMIT (exit 10, the forecast's own reason in the abort, the journal and the verdict)."""
from __future__ import annotations

import json
import re

from tiny_world import sft_env

from tatu.daemon.logs import read_events
from tatu.daemon.main import main as daemon_main
from tatu.evals.forecast import Forecast

# SFT without replay on the tiny trunk: drift +21% at step 4, +37% at 8, +52% at 12, +69% at 16
LIMIT = 0.6
FORGETS = dict(REPLAY_N=0, TATU_LR="1e-2", MIX_STEPS_LIMIT=40, EVAL_EVERY=4, TATU_GEN_PROMPTS=0, MIX_FORGET_LIMIT=LIMIT)


def evals_of(run_dir):
    return [e for e in read_events(run_dir / "events.jsonl") if e["event"] == "eval"]


def test_the_forecast_is_on_every_eval_from_the_third_and_appended_last(tiny_trunk, tmp_path):
    env = sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=8, EVAL_EVERY=2, MIX_FORGET_LIMIT=1)
    assert daemon_main(env) == 0
    run_dir = tmp_path / "run"
    evals = evals_of(run_dir)
    assert [e["step"] for e in evals] == [0, 2, 4, 6, 8]
    # from the third eval; none at the last step, where drift is measured
    assert [("forecast" in e) for e in evals] == [False, False, True, True, False]
    for record in evals[2:4]:
        forecast = Forecast.from_json(record["forecast"])
        assert forecast.step == record["step"] and forecast.end == 8 and forecast.n_evals == evals.index(record) + 1
        assert forecast.lo <= forecast.hi and forecast.band[-1].step == 8
        # the contract line as it was, then the forecast: nothing before it moved
        before, _, after = record["line"].partition(" forecast@8=")
        assert re.fullmatch(r"EVAL \d+: sftHeld .* drift_ci=\S+ mde=\S+.*", before)
        assert after.startswith(record["line"].split("forecast@8=")[1].split()[0])
        assert "forecast_ci=[" in after and "forecast_cross=" in after
    assert all("forecast@" not in e["line"] for e in evals[:2])
    log = (run_dir / "run.log").read_text()
    assert sum(" forecast@8=" in line for line in log.splitlines() if "EVAL " in line) == 2
    saved = json.loads((run_dir / "state" / "resume.json").read_text())
    assert sorted(map(int, saved["ruler_lines"])) == [2, 4, 6, 8]


def test_forecast_abort_ends_the_run_before_drift_crosses_and_is_off_by_default(tiny_trunk, tmp_path):
    """The same forgetting run twice. Off (the default): an eval forecasts a lower bound over the limit
    and the run trains on until drift itself crosses. On: it ends at that eval, exit 10, drift still
    under the limit, with the forecast's own reason; no eval before the third has a forecast."""
    plain = tmp_path / "plain"
    assert daemon_main(sft_env(tiny_trunk, plain, **FORGETS)) == 10
    plain_evals = evals_of(plain / "run")
    doomed = next(e for e in plain_evals if (e.get("forecast") or {}).get("lo", -1) > LIMIT)
    crossed = plain_evals[-1]
    assert doomed["drift"]["value"] <= LIMIT < crossed["drift"]["value"] and doomed["step"] < crossed["step"]
    (plain_abort,) = [e for e in read_events(plain / "run" / "events.jsonl") if e["event"] == "abort"]
    assert plain_abort["reason"].startswith("drift ") and "by" not in plain_abort

    early = tmp_path / "early"
    assert daemon_main(sft_env(tiny_trunk, early, MIX_FORECAST_ABORT=1, **FORGETS)) == 10
    run_dir = early / "run"
    evals = evals_of(run_dir)
    assert [e["step"] for e in evals] == [e["step"] for e in plain_evals if e["step"] <= doomed["step"]]
    assert ["forecast" in e for e in evals[:3]] == [False, False, True]
    last = evals[-1]
    assert last["forecast"] == doomed["forecast"] and last["drift"]["value"] <= LIMIT
    (abort,) = [e for e in read_events(run_dir / "events.jsonl") if e["event"] == "abort"]
    assert abort["step"] == doomed["step"] and abort["by"] == "forecast" and abort["forecast"] == last["forecast"]
    assert abort["reason"].startswith("forecast: drift at step 40 ") and "MIX_FORECAST_ABORT=1" in abort["reason"]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["verdict"] == "forgets" and "(aborted: forecast: drift at step 40" in verdict["line"]
    assert f"ABORT at step {doomed['step']}: forecast: drift at step 40" in (run_dir / "run.log").read_text()


def test_tatu_status_shows_the_last_evals_forecast_and_its_json_holds_it():
    """The status reply (as `tatu status --json` prints it) carries the eval's forecast record, and
    the readable status says it in one line."""
    from run_records import eval_record

    from tatu.daemon.config import load_config
    from tatu.daemon.run.records import Best
    from tatu.daemon.supervisor import Supervisor
    from tatu.evals.forecast import BandPoint, Crossing
    from tatu.ops.status import format_status

    forecast = Forecast(16, 200, 0.061, 0.032, 0.098, 0.08, Crossing(None, 150, None),
                        [BandPoint(16, 0.02, 0.015, 0.025), BandPoint(200, 0.061, 0.032, 0.098)], 3)
    cfg, _ = load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", "TATU_RUN": "forecast-status"})
    with Supervisor(cfg, {}) as supervisor:
        supervisor.publish_eval(eval_record(16, 0.02, forecast=forecast), Best(16, "sftHeld", 9.0))
        reply = supervisor.reply_status({})
    assert reply["last_eval"]["forecast"] == forecast.to_json()
    shown = format_status(json.loads(json.dumps(reply)))
    assert ("        forecast drift at step 200 +6.1% [+3.2%,+9.8%] (90%, 3 evals); crosses 8.0%: "
            "not before the end [150,>200]") in shown.splitlines()
    supervisor_less = format_status({**reply, "last_eval": {**reply["last_eval"], "forecast": None}})
    assert "forecast drift" not in supervisor_less


def test_the_ruler_lines_survive_the_resume_state_and_an_older_state_has_none():
    """What a restart forecasts from: the per-line sums of every eval, through the state's JSON."""
    from tatu.daemon.run.state import RunState

    state = RunState(step=16, ruler_lines={8: [1.5, 2.25], 16: [1.75, 2.5]})
    payload = json.loads(json.dumps(state.to_json()))
    assert RunState.from_json(payload, 100, 0).ruler_lines == {8: [1.5, 2.25], 16: [1.75, 2.5]}
    older = {k: v for k, v in payload.items() if k != "ruler_lines"}
    assert RunState.from_json(older, 100, 0).ruler_lines == {}
    assert "ruler_lines" not in RunState(step=3).to_json()  # a trunk's state (no forecast) stays as it was

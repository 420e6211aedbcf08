"""RunState, what a run has measured and decided: its JSON round trip, and an older format refused (65)."""
from __future__ import annotations

import json

import pytest

from tatu import exitcodes
from tatu.daemon.main import exit_code_for
from tatu.daemon.run.records import Abort, Best
from tatu.daemon.run.state import RunState
from tatu.evals.scoring import SetResult
from tatu.model.checkpoint import CheckpointError

from run_records import eval_record


def result(name: str, nll: list[float]) -> SetResult:
    lines = {"index": list(range(len(nll))), "nll_sum": nll, "n_tokens": [3] * len(nll),
             "n_chars": [5] * len(nll), "n_bytes": [5] * len(nll)}
    return SetResult.from_json({"name": name, "kind": "text", "n_lines_total": len(nll), "lines_sha256": "x",
                                "lines": lines, "extra": {"file_sha256": "f"}}, n_resamples=100, seed=0)


def test_run_state_json_round_trip():
    state = RunState(step=7, baseline={"enRuler": result("enRuler", [1.5, 2.25, 3.0])},
                     best=Best(4, "sftHeld", 9.5), history=[eval_record(0), eval_record(4, drift=0.02)],
                     trunk_reference={"enRuler": result("enRuler", [1.0, 2.0, 4.0])},
                     aborted=Abort(7, "r", 10), eval_files={"enRuler": "abc"}, lr_schedule_end=14)
    payload = json.loads(json.dumps(state.to_json(), allow_nan=False))
    again = RunState.from_json(payload, n_resamples=100, seed=0)
    assert again.to_json() == state.to_json()
    assert again.baseline["enRuler"].ppl == state.baseline["enRuler"].ppl
    assert again.trunk_reference["enRuler"].extra == {"file_sha256": "f"}
    assert RunState.from_json(RunState().to_json(), 100, 0) == RunState()
    assert again.lr_schedule_end == 14
    assert again.history == state.history and again.best == state.best and again.aborted == state.aborted
    # a state saved before the LR schedule's end was stored: None, which daemon/start.py resolves
    older = {k: v for k, v in state.to_json().items() if k != "lr_schedule_end"}
    assert RunState.from_json(older, 100, 0).lr_schedule_end is None


def test_a_resume_state_of_the_older_format_is_refused_with_65_not_a_crash():
    old = {**RunState(step=3).to_json(), "baseline": {"enRuler": {"ppl": 5.0, "nll_sum": [1.0], "line_tokens": [1]}}}
    with pytest.raises(CheckpointError, match="older format; start a new TATU_RUN") as caught:
        RunState.from_json(old, 100, 0)
    assert exit_code_for(caught.value) == exitcodes.BAD_DATA

"""The daemon's parts one at a time: the Trainer's step against a naive float64 computation,
RunState's JSON round trip, the Supervisor's requests, and the one exit-code table."""
from __future__ import annotations

import copy
import json
import socket

import numpy as np
import pytest
import torch

from tatu import exitcodes
from tatu.daemon.config import ConfigError, load_config
from tatu.daemon.main import exit_code_for
from tatu.daemon.main import main as daemon_main
from tatu.daemon.state import RunState
from tatu.daemon.supervisor import Supervisor
from tatu.daemon.trainer import Trainer
from tatu.data.manifest import DataConfigError, DataError, check_tokenizer
from tatu.data.stream import IGNORE_INDEX, MicroBatch, StepBatch
from tatu.evals.scoring import SetResult
from tatu.evals.sets import EvalSetError
from tatu.model.checkpoint import CheckpointError
from tatu.model.gpt import GPTConfig

VOCAB, SEQ = 30, 12


def config(**env):
    base = {"TATU_DATA": "d", "TATU_MODE": "pretrain", "TATU_SEED": "3", "TATU_LR": "1e-2", "TATU_PRECISION": "fp32"}
    return load_config({**base, **{k: str(v) for k, v in env.items()}})[0]


def trainer(**env) -> Trainer:
    gpt = GPTConfig(vocab_size=VOCAB, block_size=SEQ, n_layer=1, n_head=2, n_embd=16)
    return Trainer(config(**env), gpt, torch.device("cpu"))


def step_batch() -> StepBatch:
    """Two channels whose micro-batches hold very different numbers of targets."""
    rng = np.random.default_rng(0)
    micro = []
    for channel, keep in (("sft", 0.15), ("sft", 0.3), ("replay", 1.0)):
        x = rng.integers(0, VOCAB, (2, SEQ))
        y = rng.integers(0, VOCAB, (2, SEQ))
        y[rng.random((2, SEQ)) > keep] = IGNORE_INDEX
        micro.append(MicroBatch(channel, x, y))
    targets = {"sft": micro[0].n_targets + micro[1].n_targets, "replay": micro[2].n_targets}
    return StepBatch(micro, targets, targets["replay"] / sum(targets.values()))


def naive_losses(model, batch: StepBatch) -> tuple[float, float]:
    """(sum of every target's NLL / all targets, the mean of the micro-batch means), in float64."""
    model64 = copy.deepcopy(model).double().eval()
    sums, counts = [], []
    for micro in batch.micro_batches:
        with torch.no_grad():
            logits, _ = model64(torch.from_numpy(micro.x))
        logp = torch.log_softmax(logits, dim=-1)
        total, count = 0.0, 0
        for b in range(micro.y.shape[0]):
            for t in range(micro.y.shape[1]):
                if micro.y[b, t] != IGNORE_INDEX:
                    total -= float(logp[b, t, micro.y[b, t]])
                    count += 1
        sums.append(total)
        counts.append(count)
    return sum(sums) / sum(counts), float(np.mean([s / c for s, c in zip(sums, counts)]))


def test_step_loss_is_token_weighted_over_the_whole_step():
    t = trainer(TATU_DROPOUT=0)
    batch = step_batch()
    token_weighted, mean_of_means = naive_losses(t.model, batch)
    assert abs(token_weighted - mean_of_means) > 1e-3 * token_weighted  # the two readings differ here
    stats = t.step(batch, 1)
    assert stats.loss == pytest.approx(token_weighted, rel=1e-5)
    assert stats.target_tokens == batch.target_tokens and stats.replay_fraction == batch.replay_fraction
    assert stats.input_tokens == 3 * 2 * SEQ and stats.grad_norm is not None and stats.grad_norm > 0


def test_accumulated_gradient_is_the_gradient_of_the_whole_step_loss():
    """The division by the step's target tokens (the seam a data-parallel wrapper all-reduces)."""
    t = trainer(TATU_DROPOUT=0)
    reference = copy.deepcopy(t.model)
    batch = step_batch()
    t.optimizer.zero_grad(set_to_none=True)
    t._accumulate(batch.micro_batches, batch.total_targets)
    nll_sum = sum(reference(torch.from_numpy(m.x), torch.from_numpy(m.y))[1].sum() for m in batch.micro_batches)
    (nll_sum / batch.total_targets).backward()
    for (name, ours), theirs in zip(t.model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_a_non_finite_step_changes_no_weight_and_clip_off_reports_no_norm():
    t = trainer(TATU_FAULT_NAN_STEP=1, TATU_GRAD_CLIP=0)
    before = [p.detach().clone() for p in t.model.parameters()]
    stats = t.step(step_batch(), 1)
    assert not stats.finite and stats.grad_norm is None
    assert all(torch.equal(a, b) for a, b in zip(before, t.model.parameters()))
    assert t.step(step_batch(), 2).finite  # the fault is one step's


def result(name: str, nll: list[float]) -> SetResult:
    lines = {"index": list(range(len(nll))), "nll_sum": nll, "n_tokens": [3] * len(nll),
             "n_chars": [5] * len(nll), "n_bytes": [5] * len(nll)}
    return SetResult.from_json({"name": name, "kind": "text", "n_lines_total": len(nll), "lines_sha256": "x",
                                "lines": lines, "extra": {"file_sha256": "f"}}, n_resamples=100, seed=0)


def test_run_state_json_round_trip():
    state = RunState(step=7, baseline={"enRuler": result("enRuler", [1.5, 2.25, 3.0])},
                     best={"step": 4, "set": "sftHeld", "ppl": 9.5}, history=[{"step": 0, "drift": {"value": 0.0}}],
                     trunk_reference={"enRuler": result("enRuler", [1.0, 2.0, 4.0])},
                     aborted={"step": 7, "reason": "r", "code": 10}, eval_files={"enRuler": "abc"})
    payload = json.loads(json.dumps(state.to_json(), allow_nan=False))
    again = RunState.from_json(payload, n_resamples=100, seed=0)
    assert again.to_json() == state.to_json()
    assert again.baseline["enRuler"].ppl == state.baseline["enRuler"].ppl
    assert again.trunk_reference["enRuler"].extra == {"file_sha256": "f"}
    assert RunState.from_json(RunState().to_json(), 100, 0) == RunState()


def test_a_resume_state_of_the_older_format_is_refused_with_65_not_a_crash():
    old = {**RunState(step=3).to_json(), "baseline": {"enRuler": {"ppl": 5.0, "nll_sum": [1.0], "line_tokens": [1]}}}
    with pytest.raises(CheckpointError, match="older format; start a new TATU_RUN") as caught:
        RunState.from_json(old, 100, 0)
    assert exit_code_for(caught.value) == exitcodes.BAD_DATA


def test_supervisor_requests_replies_and_one_daemon_per_run():
    cfg = config(TATU_RUN="parts")
    with Supervisor(cfg, {"TATU_RUN": "env"}) as supervisor:
        assert not (supervisor.stop_requested or supervisor.eval_requested or supervisor.checkpoint_requested)
        assert "queued" in supervisor.request_eval({}) and supervisor.eval_requested
        supervisor.clear_eval_request()
        assert not supervisor.eval_requested
        supervisor.request_checkpoint({})
        supervisor.request_stop({})
        assert supervisor.checkpoint_requested and supervisor.stop_requested
        supervisor.state = RunState(history=[{"step": 3, "generations": {"samples": []}, "drift": {}}])
        assert supervisor.reply_evals({}) == {"evals": [{"step": 3, "drift": {}}]}
        assert supervisor.reply_config({})["origins"] == {"TATU_RUN": "env"}
        # over the socket, as `tatu status` asks
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(supervisor._server.path))
            client.sendall(b'{"v":1,"cmd":"status"}\n')
            reply = json.loads(client.makefile().readline())
        assert reply["ok"] and reply["run"] == "parts" and reply["config_hash"] == cfg.hash
        with pytest.raises(ConfigError, match="TATU_RUN=parts: another daemon is already listening"):
            Supervisor(cfg, {}).__enter__()


@pytest.mark.parametrize("error, code", [
    (ConfigError("x"), exitcodes.BAD_CONFIG), (DataConfigError("x"), exitcodes.BAD_CONFIG),
    (DataError("x"), exitcodes.BAD_DATA), (EvalSetError("x"), exitcodes.BAD_DATA),
    (CheckpointError("x"), exitcodes.BAD_DATA), (ValueError("x"), None), (KeyError("x"), None), (OSError("x"), None),
])
def test_one_table_maps_each_layers_failure_and_leaves_bugs_alone(error, code):
    assert exit_code_for(error) == code


def test_a_bug_in_the_loop_is_a_crash_not_bad_data(monkeypatch, tmp_path, capsys):
    def buggy_run(*_):
        raise KeyError("a bug")

    monkeypatch.setattr("tatu.daemon.loop.run", buggy_run)
    code = daemon_main({"TATU_DATA": str(tmp_path), "TATU_MODE": "pretrain", "TATU_OUT": str(tmp_path)})
    assert code == exitcodes.CRASH  # restartable, never 65
    assert "ERROR: KeyError: 'a bug'" in capsys.readouterr().out  # the traceback, logged at error priority


def test_a_tokenizer_mismatch_is_one_exit_code_wherever_it_is_found():
    with pytest.raises(DataConfigError, match="tokenizer mismatch") as caught:
        check_tokenizer({"tokenizer_hash": "a" * 64}, "data", "b" * 64)
    assert exit_code_for(caught.value) == exitcodes.BAD_CONFIG
    check_tokenizer({"tokenizer_hash": "a" * 64}, "data", "a" * 64)  # the same tokenizer passes

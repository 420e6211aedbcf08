"""The Trainer's step against a naive float64 computation: the loss is token-weighted over the
whole step, the accumulated gradient is that loss's gradient, and a non-finite step changes no weight."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from tatu.daemon.config import load_config
from tatu.daemon.trainer import StepStats, Trainer
from tatu.data.stream import IGNORE_INDEX, MicroBatch, StepBatch
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


def test_tokens_per_s_is_the_steps_input_tokens_over_its_seconds():
    """What the step event, `tatu status` and STATUS show: input tokens (padding included) / seconds, 0.1 tok/s."""
    stats = StepStats(step=1, loss=2.0, lr=1e-3, target_tokens={"sft": 300}, replay_fraction=0.0, grad_norm=0.5,
                      input_tokens=1536, seconds=0.75)
    assert stats.tokens_per_s == 2048.0
    assert StepStats(**{**stats.__dict__, "seconds": 0.7}).tokens_per_s == round(1536 / 0.7, 1) == 2194.3

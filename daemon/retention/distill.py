"""Distill the seed (LwF: Li & Hoiem 2017) on the chosen micro-batches (TATU_DISTILL_ON):

    alpha * T^2 * KL( softmax(seed_logits / T) || softmax(model_logits / T) )   per target token

summed over a micro-batch's target tokens and divided, like the cross-entropy, by all the step's
target tokens (daemon/trainer.py), so the term is token-weighted and a micro-batch without targets
adds exactly 0. T^2 keeps the gradient's scale independent of T (Hinton et al. 2015). The seed's
logits come from a frozen copy of the seed run in the step's precision, on the fly (no cache on disk).
"""
from __future__ import annotations

import time

import torch

from tatu.data.stream import IGNORE_INDEX
from tatu.model.checkpoint import load_model_state
from tatu.model.gpt import GPT


def distill_sum(model_logits: torch.Tensor, seed_logits: torch.Tensor, y: torch.Tensor, t: float) -> torch.Tensor:
    """T^2 * sum over target tokens (y != IGNORE_INDEX) of KL(p_seed/T || p_model/T), in float32
    (float64 logits stay float64); only the model's side carries a gradient."""
    rows = _target_rows(y)
    with torch.no_grad():
        scaled = _rows(seed_logits, rows).to(_work_dtype(seed_logits)) / t
        teacher_log_p = torch.log_softmax(scaled, dim=-1)
        teacher_p = torch.exp(teacher_log_p, out=scaled)  # the scaled logits' buffer, reused
    return _SeedKL.apply(_rows(model_logits, rows), teacher_log_p, teacher_p, t)


def _target_rows(y: torch.Tensor) -> torch.Tensor | None:
    """The flattened positions that are targets, or None when every position is (a replay micro-batch)."""
    valid = (y != IGNORE_INDEX).view(-1)
    return None if bool(valid.all()) else valid.nonzero().squeeze(1)


def _rows(logits: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    flat = logits.reshape(-1, logits.size(-1))
    return flat if rows is None else flat.index_select(0, rows)


def _work_dtype(logits: torch.Tensor) -> torch.dtype:
    return torch.promote_types(logits.dtype, torch.float32)


class _SeedKL(torch.autograd.Function):
    """T^2 * sum_rows KL(p || softmax(z / T)) for the seed's fixed p: one log-softmax forward and one
    elementwise backward, T * (softmax(z / T) - p). Autograd's composition of a division, two
    log-softmaxes and kl_div made twice the passes over the logits, each into a fresh buffer of the
    logits' size (page faults on every micro-batch); what this one costs: docs/forgetting.md#measured."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, teacher_log_p: torch.Tensor, teacher_p: torch.Tensor, t: float) -> torch.Tensor:
        scaled = z.to(teacher_log_p.dtype) / t
        student_log_p = torch.log_softmax(scaled, dim=-1)
        # p * (log p - log q) elementwise, then summed: the KL of two near-equal distributions is
        # not the difference of two large cross-entropies (which would cancel to noise).
        gap = torch.sub(teacher_log_p, student_log_p, out=scaled)
        value = torch.dot(teacher_p.view(-1), gap.view(-1))
        ctx.save_for_backward(student_log_p, teacher_p)
        ctx.t, ctx.z_dtype = t, z.dtype
        return value * (t * t)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        student_log_p, teacher_p = ctx.saved_tensors
        # In place on the saved log q: this graph is backpropagated once (the trainer never retains it).
        dz = student_log_p.exp_().sub_(teacher_p).mul_(grad * ctx.t)
        return dz.to(ctx.z_dtype), None, None, None


class Distiller:
    def __init__(self, gpt_config, seed_state: dict[str, torch.Tensor], channels: tuple[str, ...], alpha: float, t: float,
                 precision, device):
        self.channels, self.alpha, self.t = channels, alpha, t
        self.precision, self.device = precision, device
        # A GPT's construction draws its random init from torch's global RNG, which a restart has just
        # restored to the killed run's: the copy must not move it (its init is overwritten anyway).
        with torch.random.fork_rng(devices=[]):
            self.seed = GPT(gpt_config)
        load_model_state(self.seed, seed_state, "the seed (TATU_DISTILL)")
        self.seed.to(device).eval().requires_grad_(False)

    @property
    def memory_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.seed.parameters())

    def seed_logits(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), self.precision.autocast(self.device):
            logits, _ = self.seed(x)
        return logits

    def term(self, channel: str, x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor) -> torch.Tensor | None:
        """alpha * T^2 * the micro-batch's summed KL, or None when `channel` is not distilled."""
        if channel not in self.channels:
            return None
        return self.alpha * distill_sum(logits, self.seed_logits(x), y, self.t)

    def time_one_forward(self, micro_batch: int, seq_len: int) -> float:
        """Seconds of one seed forward on a micro-batch of the run's shape (what each distilled micro-batch adds)."""
        x = torch.zeros((micro_batch, seq_len), dtype=torch.long, device=self.device)
        self.seed_logits(x)  # the first call pays for allocations
        started = time.perf_counter()
        self.seed_logits(x)
        return time.perf_counter() - started

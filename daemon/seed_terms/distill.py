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
import torch.nn.functional as F

from tatu.data.stream import IGNORE_INDEX
from tatu.model.checkpoint import load_model_state
from tatu.model.gpt import GPT


def distill_sum(model_logits: torch.Tensor, seed_logits: torch.Tensor, y: torch.Tensor, t: float) -> torch.Tensor:
    """T^2 * sum over target tokens (y != IGNORE_INDEX) of KL(p_seed/T || p_model/T), in float32."""
    valid = y != IGNORE_INDEX
    student = F.log_softmax(model_logits.float()[valid] / t, dim=-1)
    teacher = F.log_softmax(seed_logits.float()[valid] / t, dim=-1)
    return F.kl_div(student, teacher, log_target=True, reduction="sum") * (t * t)


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

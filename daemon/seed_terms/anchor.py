"""Stay near the seed: L2-SP (Li et al. 2018) and EWC (Kirkpatrick et al. 2017).

    l2sp: lambda/2 * sum_i (theta_i - seed_i)^2        ewc: lambda/2 * sum_i F_i (theta_i - seed_i)^2

over the weights that train (TATU_TRAIN=all or top:K; lora is refused by the config). The
penalty counts once per optimizer step: its gradient, lambda * F * (theta - seed), is added to
.grad after the step's micro-batches are backpropagated (and, under torchrun, all-reduced), on
every rank alike, so neither SFT_GE + REPLAY_N nor the number of ranks multiplies it. It is
added before clipping, like any part of the step's gradient.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AnchoredWeight:
    name: str
    param: torch.nn.Parameter
    seed: torch.Tensor  # the seed's value, on the parameter's device and dtype
    fisher: torch.Tensor | None  # EWC's diagonal Fisher, same shape; None for L2-SP (F = 1)


class Anchor:
    def __init__(self, kind: str, weight: float, trainable: list[tuple[str, torch.nn.Parameter]],
                 seed_state: dict[str, torch.Tensor], fisher: dict[str, torch.Tensor] | None = None):
        self.kind, self.weight = kind, weight
        self.weights = []
        for name, param in trainable:
            seed = seed_state[name].detach().to(param.device, param.dtype).clone()
            f = None if fisher is None else fisher[name].detach().to(param.device, param.dtype)
            self.weights.append(AnchoredWeight(name, param, seed, f))

    @torch.no_grad()
    def penalty(self) -> float:
        """The penalty's value at the current weights (summed in float64)."""
        total = torch.zeros((), dtype=torch.float64)
        for w in self.weights:
            total += self._weighted_square_sum(w, w.param - w.seed)
        return 0.5 * self.weight * float(total)

    @torch.no_grad()
    def add_gradient(self) -> float:
        """Adds the penalty's gradient to each weight's .grad; returns the penalty's value."""
        total = torch.zeros((), dtype=torch.float64)
        for w in self.weights:
            diff = w.param - w.seed
            total += self._weighted_square_sum(w, diff)
            if w.fisher is not None:
                diff.mul_(w.fisher)
            diff.mul_(self.weight)
            if w.param.grad is None:
                w.param.grad = diff
            else:
                w.param.grad.add_(diff)
        return 0.5 * self.weight * float(total)

    @staticmethod
    def _weighted_square_sum(w: AnchoredWeight, diff: torch.Tensor) -> torch.Tensor:
        sq = diff.double().square()
        return (sq if w.fisher is None else sq * w.fisher.double()).sum().cpu()

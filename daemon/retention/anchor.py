"""Stay near the seed: L2-SP (Li et al. 2018) and EWC (Kirkpatrick et al. 2017).

    l2sp: lambda/2 * sum_i (theta_i - seed_i)^2        ewc: lambda/2 * sum_i F_i (theta_i - seed_i)^2

over the weights that train (TATU_TRAIN=all or top:K; lora is refused by the config). The
penalty counts once per optimizer step: its gradient, lambda * F * (theta - seed), is added to
.grad after the step's micro-batches are backpropagated (and, under torchrun, all-reduced), on
every rank alike, so neither SFT_GE + REPLAY_N nor the number of ranks multiplies it. It is
added before clipping, like any part of the step's gradient.

Cost: the penalty is memory-bound, a few passes over the trained weights per step, so it is
written to make no allocation the size of a weight (a fresh one costs its page faults on every
step: bench/retention.py measured that at 9% of a step for EWC). Each weight's scaled difference
r = sqrt(lambda * F) * (theta - seed) goes into one scratch buffer the size of the largest weight;
the gradient is r * sqrt(lambda * F) and the penalty 1/2 * r.r, summed in float64 in small chunks.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

_CHUNK = 1 << 16  # elements per float64 partial sum: small enough to stay in cache

# A term whose gradient norm is more than SWAMPS times the data's is what the step learns: the run is
# learning the penalty, not the data (lower TATU_ANCHOR_WEIGHT). The loop warns once (docs/forgetting.md).
SWAMPS = 10.0


@dataclass
class AnchoredWeight:
    name: str
    param: torch.nn.Parameter
    seed: torch.Tensor  # the seed's value, on the parameter's device and dtype
    root_scale: torch.Tensor | float  # sqrt(lambda * F): a tensor of the weight's shape for EWC, sqrt(lambda) for L2-SP


class Anchor:
    def __init__(self, kind: str, weight: float, trainable: list[tuple[str, torch.nn.Parameter]],
                 seed_state: dict[str, torch.Tensor], fisher: dict[str, torch.Tensor] | None = None):
        self.kind, self.weight = kind, weight
        self.gradient_norm: float | None = None  # of the gradient the last add_gradient added
        self._fisher = fisher is not None
        self.weights = []
        for name, param in trainable:
            seed = seed_state[name].detach().to(param.device, param.dtype).clone()
            root = (weight ** 0.5 if fisher is None else
                    (fisher[name].detach().to(param.device, torch.float64) * weight).sqrt().to(param.dtype))
            self.weights.append(AnchoredWeight(name, param, seed, root))
        largest = max((w.param.numel() for w in self.weights), default=0)
        first = self.weights[0].param if self.weights else torch.empty(0)
        self._scratch = torch.empty(largest, dtype=first.dtype, device=first.device)

    @torch.no_grad()
    def penalty(self) -> float:
        """The penalty's value at the current weights (summed in float64)."""
        return self._visit(add_gradient=False)

    @torch.no_grad()
    def add_gradient(self) -> float:
        """Adds the penalty's gradient to each weight's .grad; returns the penalty's value. The norm of
        the gradient it added is then `gradient_norm` (read, never used by the step's arithmetic)."""
        return self._visit(add_gradient=True)

    def _visit(self, add_gradient: bool) -> float:
        total = torch.zeros((), dtype=torch.float64, device=self._scratch.device)
        added = torch.zeros((), dtype=torch.float64, device=self._scratch.device)  # |gradient|^2, EWC's
        for w in self.weights:
            r = self._scratch[: w.param.numel()].view(w.param.shape)
            torch.sub(w.param, w.seed, out=r)
            r.mul_(w.root_scale)
            if add_gradient:
                if w.param.grad is None:
                    w.param.grad = r * w.root_scale
                elif isinstance(w.root_scale, float):
                    w.param.grad.add_(r, alpha=w.root_scale)
                else:
                    w.param.grad.addcmul_(r, w.root_scale)
            for chunk in r.view(-1).split(_CHUNK):
                chunk = chunk.double()
                total += torch.dot(chunk, chunk)
            if add_gradient and not isinstance(w.root_scale, float):  # the added r * sqrt(lambda F), chunk by chunk
                for chunk, root in zip(r.view(-1).split(_CHUNK), w.root_scale.view(-1).split(_CHUNK)):
                    chunk = (chunk * root).double()
                    added += torch.dot(chunk, chunk)
        if add_gradient:
            # L2-SP adds sqrt(lambda) * r: its norm is sqrt(lambda) * |r| = sqrt(lambda * 2 * penalty)
            self.gradient_norm = (float(added) if self._fisher else self.weight * float(total)) ** 0.5
        return 0.5 * float(total)

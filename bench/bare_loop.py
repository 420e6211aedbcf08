"""The daemon's training arithmetic without the daemon: the baseline bench/overhead.py and
bench/scale.py time it against.

The same AdamW groups (decay on weights of 2+ dims), the same MixedStream, each micro-batch's
NLL sum divided by the step's target tokens, the loss summed in float64 on the device, clipping
when TATU_GRAD_CLIP is set, the run's autocast: daemon/trainer.py operation for operation at the
benches' settings (the defaults TATU_TRAIN=all, TATU_SCHEDULE=constant, TATU_WARMUP_STEPS=0:
this loop has no schedule and trains every weight), so the per-step losses equal the daemon's there (both benches print that
as evidence). No evals, logging, socket, memory samples or checkpoints.
"""
from __future__ import annotations

import time

import torch

from tatu.data.stream import MixedStream
from tatu.model.precision import resolve_precision


def bare_loop(model: torch.nn.Module, config, steps: int, device: torch.device,
              forward: torch.nn.Module | None = None) -> tuple[list[float], list[float]]:
    """(seconds, loss) per step of `steps` steps of `model` (already on `device`) with the
    settings of `config` (a RunConfig); `forward` (e.g. torch.compile(model)) runs the forward."""
    forward = forward or model
    precision = resolve_precision(config.precision, device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=config.lr,
                                  betas=(config.beta1, config.beta2))
    stream = MixedStream(config.data, mix=config.mix, micro_batch=config.micro_batch, seq_len=config.seq_len,
                         seed=config.seed)
    model.train()
    seconds, losses = [], []
    for _ in range(steps):
        started = time.perf_counter()
        batch = stream.next_step()
        total = max(batch.total_targets, 1)
        optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for micro in batch.micro_batches:
            with precision.autocast(device):
                _, nll = forward(torch.from_numpy(micro.x).to(device), torch.from_numpy(micro.y).to(device))
            micro_loss = nll.sum()
            (micro_loss / total).backward()
            loss_sum += micro_loss.detach().double()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        losses.append(loss_sum.item() / total)
        seconds.append(time.perf_counter() - started)
    return seconds, losses

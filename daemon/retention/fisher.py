"""EWC's F: the seed's diagonal Fisher information, estimated once at a run's start.

On TATU_EWC_BATCHES micro-batches of replay (the channel replay, or REPLAY_SOURCES by their shares),
drawn by a stream of its own (the run's stream and RNGs are not touched), each sequence is one example:

    F_i = mean over sequences s of ( d/dtheta_i  sum_{t targets of s} log p_seed(label_t | s_<t) )^2

with label_t sampled from the seed's own distribution ("true" Fisher, TATU_EWC_FISHER=true, the
default, as wise-ft's compute_fisher) or the data's next token ("empirical"). The default is the
true Fisher because it is the Fisher: the empirical one equals it only where the seed fits the data
exactly, and on text it does not (Kunstner et al. 2019, "Limitations of the empirical Fisher").
The per-sequence gradients come from torch.func (vmap of grad), in fp32 whatever TATU_PRECISION
(squares of bf16 gradients lose the small entries). Labels are drawn by a torch.Generator seeded
by TATU_SEED, on the CPU, so a run estimates the same F on any device.

The file (RUN_DIR/fisher.safetensors) is written atomically; the resume state keeps its sha256
and a restart loads it (never recomputes it) or refuses a file that changed (65).
"""
from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load as load_safetensors, save as save_safetensors
from torch.func import functional_call, grad, vmap

from tatu.atomic import write_atomic
from tatu.daemon.run.paths import FISHER, RunDir
from tatu.data.stream import IGNORE_INDEX
from tatu.model.checkpoint import CheckpointError

FISHER_FILE = FISHER  # the name the retention-terms record gives (setup.py)


@dataclass
class FisherFile:
    fisher: dict[str, torch.Tensor]
    sha256: str


def fisher_labels(model, x: torch.Tensor, y: torch.Tensor, kind: str, generator: torch.Generator) -> torch.Tensor:
    """The labels the Fisher's log-likelihood is taken at: sampled from the seed (true) or y
    (empirical); IGNORE_INDEX wherever y has nothing to predict."""
    if kind == "empirical":
        return y
    with torch.no_grad():
        logits, _ = model(x)
    probs = F.softmax(logits.float(), dim=-1).cpu().view(-1, logits.size(-1))
    sampled = torch.multinomial(probs, 1, generator=generator).view(y.shape).to(y.device)
    return torch.where(y == IGNORE_INDEX, y, sampled)


def batch_fisher_sum(model, names: list[str], x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """sum over the rows of x of the squared per-row gradient of the row's summed log-likelihood."""
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    wanted = {n: params[n] for n in names}
    fixed = {n: v for n, v in {**params, **buffers}.items() if n not in wanted}

    def row_log_likelihood(theta: dict, x_row: torch.Tensor, label_row: torch.Tensor) -> torch.Tensor:
        logits, _ = functional_call(model, {**fixed, **theta}, (x_row.unsqueeze(0),))
        logp = F.log_softmax(logits.float()[0], dim=-1)
        valid = label_row != IGNORE_INDEX
        picked = logp.gather(-1, torch.where(valid, label_row, 0).unsqueeze(-1)).squeeze(-1)
        return (picked * valid).sum()

    with warnings.catch_warnings():  # vmap over CPU sdpa falls back to a loop, and says so on every call
        warnings.filterwarnings("ignore", message="There is a performance drop")
        per_row = vmap(grad(row_log_likelihood), in_dims=(None, 0, 0))(wanted, x, labels)
    return {n: g.square().sum(0) for n, g in per_row.items()}


def estimate_fisher(model, names: list[str], micro_batches, kind: str, seed: int, device) -> dict[str, torch.Tensor]:
    """F over `micro_batches` (MicroBatch objects), averaged per sequence; the model is put in eval mode."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    totals = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in model.named_parameters() if n in names}
    rows = 0
    for micro in micro_batches:
        x = torch.from_numpy(micro.x).to(device)
        y = torch.from_numpy(micro.y).to(device)
        labels = fisher_labels(model, x, y, kind, generator)
        for n, s in batch_fisher_sum(model, names, x, labels).items():
            totals[n] += s.float()
        rows += x.size(0)
    return {n: (t / max(rows, 1)).cpu().contiguous() for n, t in totals.items()}


def write_fisher(run_dir: Path, fisher: dict[str, torch.Tensor]) -> str:
    """Writes RUN_DIR/fisher.safetensors atomically; returns its sha256."""
    payload = save_safetensors({n: t.contiguous() for n, t in fisher.items()})
    write_atomic(RunDir(run_dir).fisher_file, payload)
    return hashlib.sha256(payload).hexdigest()


def read_fisher(run_dir: Path, sha256: str) -> FisherFile:
    """The run's Fisher as its resume state names it (CheckpointError, 65, when missing or changed)."""
    path = RunDir(run_dir).fisher_file
    try:
        payload = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{path}: the run's Fisher (TATU_ANCHOR=ewc) cannot be read: {exc.strerror}") from None
    found = hashlib.sha256(payload).hexdigest()
    if found != sha256:
        raise CheckpointError(f"{path}: sha256 {found[:12]} is not the {sha256[:12]} its resume state recorded; "
                              f"the run's Fisher changed: start a new TATU_RUN")
    return FisherFile(load_safetensors(payload), found)


def summary(fisher: dict[str, torch.Tensor], top: int = 3) -> str:
    """Mean, max (and where) and the tensors holding the largest shares of the Fisher's total."""
    count = sum(t.numel() for t in fisher.values())
    sums = {n: float(t.double().sum()) for n, t in fisher.items()}
    total = sum(sums.values())
    peak_name = max(fisher, key=lambda n: float(fisher[n].max()))
    shares = sorted(sums, key=sums.get, reverse=True)[:top]
    shown = ", ".join(f"{n} {sums[n] / total:.0%}" if total > 0 else n for n in shares)
    return (f"Fisher mean {total / max(count, 1):.3g}, max {float(fisher[peak_name].max()):.3g} ({peak_name}); "
            f"largest shares: {shown}")

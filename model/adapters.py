"""Which weights of a GPT train, applied to a model: frozen trunks, the top K blocks, LoRA adapters.

LoRA as the field does it (Hu et al. 2021; PEFT's defaults): a frozen Linear W gets two trained
matrices A (rank x in, Kaiming-uniform) and B (out x rank, zeros), and computes
W x + (alpha / rank) * B A dropout(x). B = 0 makes step 0 equal the seed exactly. A LoRALinear
keeps the Linear's own `weight` and `bias` names, so a state dict is the base GPT's plus
`<module>.lora_A` / `<module>.lora_B`; `merge_state` folds the adapters into plain GPT weights
(W + scaling * B @ A), which every checkpoint reader loads unchanged.
"""
from __future__ import annotations

import hashlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from tatu.model.gpt import GPT
from tatu.model.train_spec import TrainSpec

ADAPTER_SUFFIXES = (".lora_A", ".lora_B")


class LoRALinear(nn.Linear):
    """An nn.Linear (its weight and bias frozen) plus a trained low-rank update."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float):
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight, self.bias = base.weight, base.bias  # the same Parameters: nothing is copied
        self.rank, self.scaling = rank, alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, dtype=base.weight.dtype, device=base.weight.device))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, dtype=base.weight.dtype, device=base.weight.device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # nn.Linear's own init, as PEFT uses
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x):
        y = F.linear(x, self.weight, self.bias)
        h = F.linear(self.lora_dropout(x), self.lora_A)
        # The scaling and the sum inside one GEMM (beta=1): on CPU the separate scale and add passes
        # over the (tokens x out) output cost as much as the rank-r products themselves.
        return torch.addmm(y.flatten(0, -2), h.flatten(0, -2), self.lora_B.t(), alpha=self.scaling).view(y.shape)


def merge_weight(weight: torch.Tensor, lora_A: torch.Tensor, lora_B: torch.Tensor, scaling: float) -> torch.Tensor:
    """weight + scaling * B @ A, summed in float64 and rounded once to the weight's dtype."""
    return (weight.double() + (lora_B.double() @ lora_A.double()) * scaling).to(weight.dtype)


def lora_modules(model: GPT) -> dict[str, LoRALinear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


def apply_train_spec(model: GPT, spec: TrainSpec) -> None:
    """Freeze what does not train and attach adapters; TATU_TRAIN=all leaves the model untouched.

    The adapters' A draws from torch's global RNG: the caller seeds it, so a run is reproducible."""
    if spec.full:
        return
    spec.check_model(model.config.n_layer)
    for p in model.parameters():
        p.requires_grad_(False)
    blocks = model.transformer.h
    if spec.mode == "top":
        for block in blocks[len(blocks) - spec.top_k:]:
            block.requires_grad_(True)
        model.transformer.ln_f.requires_grad_(True)
    if spec.embeddings:
        model.transformer.wte.requires_grad_(True)
        model.transformer.wpe.requires_grad_(True)
    if spec.lora is not None:
        lora = spec.lora
        for index in lora.blocks(model.config.n_layer):
            for target in lora.targets:
                parent_name, _, leaf = target.rpartition(".")
                parent = blocks[index].get_submodule(parent_name)
                setattr(parent, leaf, LoRALinear(getattr(parent, leaf), lora.rank, lora.alpha, lora.dropout))


def trainable_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of what trains, in the model's own order (the tied head counted once)."""
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def is_adapter_key(name: str) -> bool:
    return name.endswith(ADAPTER_SUFFIXES)


def split_adapter_state(state: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    """(base weights, adapter tensors) of a state dict."""
    adapter = {k: v for k, v in state.items() if is_adapter_key(k)}
    return {k: v for k, v in state.items() if k not in adapter}, adapter


def merge_state(state: dict[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """A state dict with adapters (a LoRA run's resume state) as plain GPT weights."""
    base, adapters = split_adapter_state(state)
    merged = dict(base)
    for key in adapters:
        if key.endswith(".lora_A"):
            module = key.removesuffix(".lora_A")
            merged[f"{module}.weight"] = merge_weight(base[f"{module}.weight"], adapters[key],
                                                      adapters[f"{module}.lora_B"], scaling)
    return merged


def state_sha256(state: dict[str, torch.Tensor]) -> str:
    """A digest of tensors by name, dtype, shape and bytes: names a base whatever file it came from."""
    digest = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def _blocks_named(names: list[str]) -> str:
    blocks = sorted({int(n.split(".")[2]) for n in names if n.startswith("transformer.h.")})
    parts = []
    if blocks:
        ranges, start = [], blocks[0]
        for prev, cur in zip(blocks, blocks[1:] + [None]):
            if cur != prev + 1:
                ranges.append(f"h.{start}" if start == prev else f"h.{start}-{prev}")
                start = cur
        parts.extend(ranges)
    for whole in ("ln_f", "wte", "wpe"):
        if any(n.startswith(f"transformer.{whole}.") for n in names):
            parts.append(whole if whole != "wte" else "wte (tied head)")
    return ", ".join(parts)


def count(n: int) -> str:
    """1.3M, 41.2k, 812: parameter counts at the scale they have."""
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def trainable_summary(model: GPT, spec: TrainSpec) -> dict:
    """What trains, as numbers and one line: 'trainable 1.3M of 27.1M (4.8%): h.6-7, ln_f'."""
    trainable = trainable_parameters(model)
    n_trainable = sum(p.numel() for _, p in trainable)
    n_base = sum(p.numel() for name, p in model.named_parameters() if not is_adapter_key(name))
    summary = {"train": spec.describe(), "trainable": n_trainable, "base": n_base,
               "tensors": len(trainable)}
    if spec.lora is not None:
        n_modules = len(lora_modules(model))
        summary["lora_modules"] = n_modules
        extra = f" + {_blocks_named([n for n, _ in trainable if not is_adapter_key(n)])}" if spec.embeddings else ""
        summary["line"] = (f"lora r={spec.lora.rank} alpha={spec.lora.alpha:g} on {n_modules} modules: "
                           f"{count(n_trainable)} trainable ({100 * n_trainable / n_base:.1f}% of {count(n_base)}){extra}")
    else:
        summary["line"] = (f"trainable {count(n_trainable)} of {count(n_base)} "
                           f"({100 * n_trainable / n_base:.1f}%): {_blocks_named([n for n, _ in trainable]) or 'nothing'}")
    return summary

"""Weights on the straight line between two checkpoints of one architecture (WiSE-FT,
Wortsman et al. 2022): theta = (1 - alpha) * theta_seed + alpha * theta_ft, per tensor.

The sum is taken in float64 and rounded once to the tensor's dtype, so no alpha carries an
intermediate float32 rounding. The tied lm_head is not a tensor of its own in a saved state
(tatu.model.checkpoint.TIED_KEYS): the embedding is interpolated once and the model built from
the result ties it again, so the two stay one tensor.
"""
from __future__ import annotations

import torch

from tatu.model.checkpoint import TIED_KEYS, Checkpoint
from tatu.model.gpt import GPTConfig

# The fields that fix the weights' shapes; dropout and attn are how a run trains or scores, not what it holds.
SHAPE_FIELDS = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "bias")


class ParentMismatch(ValueError):
    """The two parents cannot be interpolated: `what` is "architecture" or "tokenizer"."""

    def __init__(self, what: str, message: str):
        super().__init__(message)
        self.what = what


def check_parents(seed: Checkpoint, finetuned: Checkpoint) -> None:
    """Same tokenizer, same shape fields, same tensors (names, shapes, dtypes); else ParentMismatch
    naming both files and the first difference."""
    names = f"{seed.path} and {finetuned.path}"
    if seed.tokenizer.hash != finetuned.tokenizer.hash:
        raise ParentMismatch("tokenizer", f"{names}: different tokenizers (sha256 {seed.tokenizer.hash[:12]} vs "
                                          f"{finetuned.tokenizer.hash[:12]}): not one model's two points")
    a, b = seed.model_config.to_dict(), finetuned.model_config.to_dict()
    differ = [f"{k} {a[k]} vs {b[k]}" for k in SHAPE_FIELDS if a[k] != b[k]]
    if differ:
        raise ParentMismatch("architecture", f"{names}: different architectures ({', '.join(differ)})")
    seed_state, ft_state = plain_weights(seed), plain_weights(finetuned)
    if seed_state.keys() != ft_state.keys():
        only = sorted(seed_state.keys() ^ ft_state.keys())
        raise ParentMismatch("architecture", f"{names}: different tensors ({', '.join(only[:3])} in one only)")
    for key, tensor in seed_state.items():
        other = ft_state[key]
        if tensor.shape != other.shape or tensor.dtype != other.dtype:
            raise ParentMismatch("architecture", f"{names}: tensor {key} is {tuple(tensor.shape)} {tensor.dtype} vs "
                                                 f"{tuple(other.shape)} {other.dtype}")


def plain_weights(ckpt: Checkpoint) -> dict[str, torch.Tensor]:
    """A checkpoint's plain weights (a LoRA resume state's merged), without the tied lm_head."""
    return {k: v for k, v in ckpt.plain_state().items() if k not in TIED_KEYS}


def interpolate_state(seed: dict[str, torch.Tensor], finetuned: dict[str, torch.Tensor], alpha: float
                      ) -> dict[str, torch.Tensor]:
    """(1 - alpha) * seed + alpha * finetuned, tensor by tensor, in float64, rounded once.

    At alpha 0 and 1 the parent's own tensors are returned: the formula gives the same values
    there, but not always the same bits (-0.0 + 0.0 is +0.0), and an endpoint must be its parent."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha {alpha} is outside [0, 1]")
    if alpha in (0.0, 1.0):
        return dict(seed if alpha == 0.0 else finetuned)
    out = {}
    for key, tensor in seed.items():
        if not tensor.is_floating_point():  # an integer buffer is not a weight: both parents hold the same
            out[key] = tensor
            continue
        mixed = (1.0 - alpha) * tensor.to(torch.float64) + alpha * finetuned[key].to(torch.float64)
        out[key] = mixed.to(tensor.dtype)
    return out


def interpolated_config(seed: Checkpoint) -> GPTConfig:
    """The interpolated checkpoint's config: the seed's (check_parents made the shapes equal)."""
    return GPTConfig(**seed.model_config.to_dict())

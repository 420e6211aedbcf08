"""A LoRA run's adapter as a PEFT adapter directory, over its base exported as transformers GPT-2.

    OUT/adapter_config.json         peft_type LORA, r, lora_alpha, target_modules (GPT-2 module
                                    names, one per adapted module), fan_in_fan_out true (GPT-2's
                                    Conv1D stores weights as in x out), base_model_name_or_path OUT/base
    OUT/adapter_model.safetensors   base_model.model.<module>.lora_A.weight (r x in) / lora_B.weight (out x r)
    OUT/base/                       the seed the adapter was trained on, as `tatu export --format hf`

    PeftModel.from_pretrained(GPT2LMHeadModel.from_pretrained("OUT/base"), "OUT")

tatu's module names are GPT-2's and its A/B shapes are PEFT's (A: rank x in, B: out x rank, for a
Conv1D too), so the tensors are copied, not transposed. The base is named in the checkpoint by the
sha256 of its weights; a seed that is missing or has changed since is refused (CheckpointError,
exit 65) naming it. The tied embedding never carries an adapter: wte (and so the head) is the
seed's. A run that also trained the embeddings (TATU_TRAIN_EMBEDDINGS=1) changed its base, which a
LoRA adapter cannot express: refused, pointing at `--format hf` (the merged weights).
"""
from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save as st_save

from tatu.atomic import atomic_directory
from tatu.model.adapters import state_sha256
from tatu.model.checkpoint import TIED_KEYS, Checkpoint, CheckpointError, model_state_for_saving
from tatu.model.hf import export_hf, load_checkpoint_or_gpt2

PEFT_PREFIX = "base_model.model."


def adapter_base(ckpt: Checkpoint) -> Checkpoint:
    """The seed a LoRA checkpoint's adapter applies to, verified by sha256, or CheckpointError naming it."""
    adapter = ckpt.meta.get("adapter")
    if not isinstance(adapter, dict) or "adapter" not in ckpt.extra_tensors:
        raise CheckpointError(f"{ckpt.path}: not a LoRA checkpoint (no adapter beside the weights); "
                              f"export it with --format hf")
    if adapter.get("embeddings_trained"):
        raise CheckpointError(f"{ckpt.path}: the run also trained the embeddings (TATU_TRAIN_EMBEDDINGS=1), so its "
                              f"base is no longer the seed and a LoRA adapter cannot carry it; export the merged "
                              f"weights with --format hf")
    source = adapter.get("base")
    try:
        base = load_checkpoint_or_gpt2(source)
    except CheckpointError as exc:
        raise CheckpointError(f"{ckpt.path}: its base {source} (the seed of the run) cannot be read: {exc}") from None
    # Through a model, so a seed stored in another dtype or layout (legacy .pt, GPT-2 dir) hashes as the run saw it.
    weights = {k: v for k, v in model_state_for_saving(base.build_model()).items() if k not in TIED_KEYS}
    if state_sha256(weights) != adapter.get("base_sha256"):
        raise CheckpointError(f"{ckpt.path}: its base {source} has changed since the run (sha256 of its weights "
                              f"{state_sha256(weights)[:12]}, the adapter was trained on {str(adapter.get('base_sha256'))[:12]})")
    return base


def adapter_config(meta: dict, base_dir: Path) -> dict:
    modules = sorted({f"transformer.h.{b}.{t}" for b in meta["blocks"] for t in meta["targets"]})
    return {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": meta["rank"], "lora_alpha": meta["alpha"],
        "lora_dropout": meta["dropout"], "target_modules": modules, "fan_in_fan_out": True, "bias": "none",
        "base_model_name_or_path": str(base_dir), "inference_mode": True, "init_lora_weights": True,
        "modules_to_save": None, "use_rslora": False, "use_dora": False,
    }


def export_peft(ckpt: Checkpoint, out: str | Path) -> Path:
    """Write OUT (adapter) and OUT/base (GPT-2 directory); the directory appears complete or not at all."""
    out = Path(out).absolute()
    if out.exists():
        raise FileExistsError(f"{out}: already exists; give a new directory")
    base = adapter_base(ckpt)
    tensors = {PEFT_PREFIX + name.replace(".lora_A", ".lora_A.weight").replace(".lora_B", ".lora_B.weight"): t.contiguous()
               for name, t in ckpt.extra_tensors["adapter"].items()}
    documents = {"adapter_config.json": json.dumps(adapter_config(ckpt.meta["adapter"], out / "base"), indent=1).encode(),
                 "adapter_model.safetensors": st_save(tensors, metadata={"format": "pt"})}
    with atomic_directory(out, documents) as tmp:
        export_hf(base, tmp / "base")
    return out

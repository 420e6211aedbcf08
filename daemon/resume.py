"""The resume state: everything a killed run needs to continue bit-identically.

RunState (daemon/run/state.py) plus model, optimizer, stream position and every RNG, written
through the checkpoint format (atomic, verified on load) as <run dir>/state/.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from tatu.daemon.run.paths import RunDir
from tatu.daemon.run.state import RunState
from tatu.model.checkpoint import Checkpoint, load_checkpoint, save_checkpoint


def rng_state() -> tuple[dict, dict[str, torch.Tensor]]:
    """(JSON-able Python/numpy states, tensors for torch CPU/CUDA)."""
    py_version, py_internal, py_gauss = random.getstate()
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    doc = {
        "python": [py_version, list(py_internal), py_gauss],
        "numpy": [np_kind, np_keys.tolist(), int(np_pos), int(np_has_gauss), float(np_gauss)],
    }
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s
    return doc, tensors


def restore_rng(doc: dict, tensors: dict[str, torch.Tensor]) -> None:
    version, internal, gauss = doc["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = doc["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch_cpu"])
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("torch_cuda_")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict]]:
    sd = optimizer.state_dict()
    flat = {}
    for index, per_param in sd["state"].items():
        for key, value in per_param.items():
            if not torch.is_tensor(value):
                value = torch.tensor(value)
            flat[f"{index}.{key}"] = value
    return flat, sd["param_groups"]


def restore_optimizer(optimizer: torch.optim.Optimizer, flat: dict[str, torch.Tensor], groups: list[dict]) -> None:
    state: dict[int, dict] = {}
    for name, value in flat.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def save_resume(run_dir: Path, *, model, optimizer, gpt_config, tokenizer, run_state: RunState, stream_state: dict,
                meta: dict, ranks: tuple[dict | None, dict] = (None, {})) -> Path:
    """`ranks`: under torchrun, the other ranks' RNG and stream states (daemon/distributed.py)."""
    flat, groups = optimizer_tensors(optimizer)
    rng_doc, rng_tensors = rng_state()
    ranks_json, ranks_tensors = ranks
    resume = {**run_state.to_json(), "stream": stream_state, "optimizer_groups": groups, "rng": rng_doc}
    if ranks_json is not None:
        resume["ranks"] = ranks_json
    return save_checkpoint(
        RunDir(run_dir).state,
        model=model,
        model_config=gpt_config,
        tokenizer=tokenizer,
        meta=meta,
        extra_tensors={"optimizer": flat, "rng": rng_tensors, **ranks_tensors},
        extra_json={"resume": resume},
    )


def load_resume(run_dir: Path, device) -> Checkpoint:
    return load_checkpoint(RunDir(run_dir).state, map_location=str(device))


def restore_resume(resume: Checkpoint, optimizer, stream) -> None:
    """Optimizer moments, stream position and every RNG, as they were when the state was saved."""
    saved = resume.extra_json["resume"]
    restore_optimizer(optimizer, resume.extra_tensors["optimizer"], saved["optimizer_groups"])
    stream.load_state_dict(saved["stream"])
    restore_rng(saved["rng"], resume.extra_tensors["rng"])

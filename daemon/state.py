"""The run's state and the resume state: everything a killed run needs to continue bit-identically.

RunState is what the run has measured and decided (step, baseline, best, history, trunk
reference, abort, eval files); the resume state adds model, optimizer, stream position and
every RNG, written through the checkpoint format (atomic, verified on load).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from tatu.evals.scoring import SetResult
from tatu.model.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint

STATE_DIR = "state"


def results_to_json(results: dict[str, SetResult] | None) -> dict | None:
    return None if results is None else {name: r.to_json() for name, r in results.items()}


def results_from_json(payload: dict | None, n_resamples: int, seed: int) -> dict[str, SetResult] | None:
    if payload is None:
        return None
    return {name: SetResult.from_json(r, n_resamples, seed) for name, r in payload.items()}


def is_results_json(payload) -> bool:
    """A trunk reference in the current shape (SetResult JSON per set); older seeds stored another."""
    return isinstance(payload, dict) and all(isinstance(r, dict) and "lines" in r for r in payload.values())


@dataclass
class RunState:
    step: int = 0
    baseline: dict[str, SetResult] | None = None  # the step-0 eval: never recomputed after a restart
    best: dict | None = None  # {"step", "set", "ppl"}
    history: list[dict] = field(default_factory=list)  # every eval record, as logged
    trunk_reference: dict[str, SetResult] | None = None  # the trunk's scores, for drift_tronco
    aborted: dict | None = None  # {"step", "reason", "code"}: final, never trained past
    eval_files: dict[str, str] | None = None  # sha256 of each eval file the baseline was measured on
    category_baseline: dict[str, dict[str, SetResult]] | None = None  # the step-0 per-category results
    task_baseline: dict[str, dict] | None = None  # the step-0 per-item correctness of each task

    def to_json(self) -> dict:
        return {"step": self.step, "baseline": results_to_json(self.baseline), "best": self.best,
                "history": self.history, "trunk_reference": results_to_json(self.trunk_reference),
                "aborted": self.aborted, "eval_files": self.eval_files,
                "category_baseline": None if self.category_baseline is None else
                {name: results_to_json(per) for name, per in self.category_baseline.items()},
                "task_baseline": self.task_baseline}

    @classmethod
    def from_json(cls, payload: dict, n_resamples: int, seed: int) -> "RunState":
        for key in ("baseline", "trunk_reference"):
            if payload.get(key) is not None and not is_results_json(payload[key]):
                # A state written before eval results had one shape: not worth converting, and a
                # crash would be restarted in a loop. Exit 65, said plainly.
                raise CheckpointError(f"resume state: its {key} is in an older format; start a new TATU_RUN")
        return cls(step=payload["step"], baseline=results_from_json(payload["baseline"], n_resamples, seed),
                   best=payload["best"], history=payload["history"],
                   trunk_reference=results_from_json(payload["trunk_reference"], n_resamples, seed),
                   aborted=payload["aborted"], eval_files=payload["eval_files"],
                   category_baseline=None if payload.get("category_baseline") is None else
                   {name: results_from_json(per, n_resamples, seed) for name, per in payload["category_baseline"].items()},
                   task_baseline=payload.get("task_baseline"))


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
        run_dir / STATE_DIR,
        model=model,
        model_config=gpt_config,
        tokenizer=tokenizer,
        meta=meta,
        extra_tensors={"optimizer": flat, "rng": rng_tensors, **ranks_tensors},
        extra_json={"resume": resume},
    )


def has_resume(run_dir: Path) -> bool:
    state = run_dir / STATE_DIR
    return state.is_dir() or (run_dir / f"{STATE_DIR}.old").is_dir()


def load_resume(run_dir: Path, device) -> Checkpoint:
    return load_checkpoint(run_dir / STATE_DIR, map_location=str(device))


def restore_resume(resume: Checkpoint, optimizer, stream) -> None:
    """Optimizer moments, stream position and every RNG, as they were when the state was saved."""
    saved = resume.extra_json["resume"]
    restore_optimizer(optimizer, resume.extra_tensors["optimizer"], saved["optimizer_groups"])
    stream.load_state_dict(saved["stream"])
    restore_rng(saved["rng"], resume.extra_tensors["rng"])

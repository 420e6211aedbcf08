"""The one place a device name becomes a usable torch device ("auto" = CUDA when present), and
where a run's CPU thread count is set."""
from __future__ import annotations

import os

import torch


class DeviceError(ValueError):
    pass


def resolve_device(name: str) -> torch.device:
    """torch.device for `name`, proven usable by allocating on it; DeviceError in one line."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise DeviceError(f"{name}: not a torch device ({exc})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"{name}: CUDA is not available on this machine (use cpu)")
    try:  # catches what the check above cannot: a missing cuda:N, an absent mps backend
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:
        raise DeviceError(f"{name}: unusable ({str(exc).strip().splitlines()[0]})") from None
    return device


def set_threads(requested: int | None) -> tuple[int, str]:
    """(torch's intra-op thread count now, where it came from). CPU float sums are split across
    threads, so the count decides a run's last bits: a run that must reproduce on another
    backend (Ray gives a task OMP_NUM_THREADS=<its CPUs>) fixes it with TATU_THREADS."""
    if requested is not None:
        torch.set_num_threads(requested)
        return torch.get_num_threads(), "TATU_THREADS"
    omp = os.environ.get("OMP_NUM_THREADS")
    return torch.get_num_threads(), f"OMP_NUM_THREADS={omp}" if omp else "torch's default for this machine"

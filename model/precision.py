"""TATU_PRECISION (auto | fp32 | bf16): what the training step's matmuls run in, decided once per run.

`auto` is bf16 autocast where the device does bf16 natively — CUDA with bf16, a CPU whose flags
include amx_bf16 or avx512_bf16 — and fp32 elsewhere: emulated bf16 is slower than fp32. Only the
training step autocasts; weights, gradients, optimizer moments and every eval stay fp32, so an
eval's numbers never depend on the precision a run trained in.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

SETTINGS = ("auto", "fp32", "bf16")
# Either flag gives the CPU native bf16 dot products that oneDNN uses under autocast.
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
CPUINFO = Path("/proc/cpuinfo")


class PrecisionError(ValueError):
    pass


@dataclass(frozen=True)
class Precision:
    name: str  # "fp32" or "bf16": what a run is, stored in its resume state
    reason: str  # why: "auto: cpu has amx_bf16", "TATU_PRECISION=fp32"

    def __str__(self) -> str:
        return f"{self.name} [{self.reason}]"

    def autocast(self, device: torch.device) -> AbstractContextManager:
        if self.name == "fp32":
            return nullcontext()
        return torch.autocast(device.type, dtype=torch.bfloat16)


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The flags of the first processor in a /proc/cpuinfo text (every core has the same)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def _read_cpu_flags() -> frozenset[str]:
    try:
        return cpu_flags(CPUINFO.read_text(errors="replace"))
    except OSError:
        return frozenset()


def native_bf16(device: torch.device, flags: frozenset[str] | None = None) -> tuple[bool, str]:
    """(whether `device` does bf16 natively, the reason in a few words)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return True, f"{name} has bf16"
        return False, f"{name} lacks native bf16"
    if device.type == "cpu":
        flags = _read_cpu_flags() if flags is None else flags
        present = [flag for flag in CPU_BF16_FLAGS if flag in flags]
        if present:
            return True, f"cpu has {present[0]}"
        return False, f"cpu lacks {' and '.join(CPU_BF16_FLAGS)}"
    return False, f"{device.type}: bf16 autocast not used by auto"


def resolve_precision(setting: str, device: torch.device, flags: frozenset[str] | None = None) -> Precision:
    """The precision of a run on `device`; an explicit bf16 is proven to work by one autocast matmul."""
    if setting not in SETTINGS:
        raise PrecisionError(f"TATU_PRECISION={setting}: expected one of {', '.join(SETTINGS)}")
    native, why = native_bf16(device, flags)
    if setting == "auto":
        return Precision("bf16" if native else "fp32", f"auto: {why}")
    if setting == "fp32":
        return Precision("fp32", "TATU_PRECISION=fp32")
    if device.type == "cuda" and not native:
        raise PrecisionError(f"TATU_PRECISION=bf16: {why} (use fp32 or auto)")
    try:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            torch.ones(2, 2, device=device) @ torch.ones(2, 2, device=device)
    except (RuntimeError, AssertionError) as exc:
        raise PrecisionError(f"TATU_PRECISION=bf16: unusable on {device} ({str(exc).strip().splitlines()[0]})") from None
    return Precision("bf16", "TATU_PRECISION=bf16" + ("" if native else f"; {why}: emulated, slower than fp32"))

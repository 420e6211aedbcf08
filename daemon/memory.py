"""Memory as the operator's host sees it: our RSS, what is still available, swap in use."""
from __future__ import annotations

from pathlib import Path

import psutil

_PROC = psutil.Process()


def rss_mb() -> float:
    """Our resident set (~12 us: cheap enough for every step)."""
    return round(_PROC.memory_info().rss / 2**20, 1)


def sample() -> dict:
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return {
        "rss_mb": rss_mb(),
        "available_mb": round(vm.available / 2**20, 1),
        "swap_used_mb": round(swap.used / 2**20, 1),
    }


def oom_score_adj() -> int | None:
    """The effective value: a user unit's OOMScoreAdjust=-600 is silently not applied."""
    try:
        return int(Path("/proc/self/oom_score_adj").read_text().strip())
    except (OSError, ValueError):
        return None

"""What the status reply is made of (daemon/supervisor.py): the loop's published snapshot, the
host sample the control thread takes, and the disk numbers derived from both."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from tatu.daemon import memory
from tatu.storage import free_bytes

# Warn while there is still room: the next saves of state/, best/ and final/ each need their size again.
DISK_WARN_SAVES = 3


@dataclass(frozen=True)
class StatusSnapshot:
    """The loop's part of the status reply as it last published it. Never changed: the loop
    assigns a new one (one reference store, atomic), so the control thread reads a consistent
    record without a lock. A shallow copy suffices because the loop replaces the nested values
    (memory, last_eval, best, disk, save sizes) with new objects rather than mutating them."""
    progress: Mapping[str, Any]  # phase, step, limit, loss, lr, tokens/s, ETA, last eval, best, ...
    save_bytes: Mapping[str, int]  # checkpoint name -> bytes of its last save

    @classmethod
    def of(cls, status: dict, save_bytes: dict[str, int]) -> "StatusSnapshot":
        return cls(MappingProxyType(dict(status)), MappingProxyType(dict(save_bytes)))


@dataclass(frozen=True)
class HostSample:
    """What the status reply says of the host now (memory, oom_score_adj, free disk), taken by the
    control thread at most once per MEMORY_SAMPLE_S however many clients ask, and live during a
    long load or eval, when the loop publishes nothing."""
    taken_at: float
    memory: Mapping[str, float]
    oom_score_adj: int | None
    free_bytes: int

    @classmethod
    def take(cls, now: float, run_dir: Path) -> "HostSample":
        return cls(now, memory.sample(), memory.oom_score_adj(), free_bytes(run_dir))


def disk_fields(free: int, save_bytes: Mapping[str, int]) -> dict:
    """The status reply's disk numbers: free space against the largest last save."""
    last = max(save_bytes.values(), default=None)
    return {"disk_free_mb": round(free / 1e6, 1), "last_save_mb": None if last is None else round(last / 1e6, 3),
            "disk_low": last is not None and free < DISK_WARN_SAVES * last}

"""Paths inside a run dir that readers outside the daemon also use (the sweep's common step).

Torch-free on purpose: sweep/common.py reads the per-line eval files from here without
loading the training code (daemon/actions.py imports torch and the checkpoint writers)."""
from __future__ import annotations

from pathlib import Path


def eval_lines_path(run_dir: Path, step: int) -> Path:
    """Where TATU_EVAL_LINES=1 keeps the per-line scores of the eval at `step`."""
    return Path(run_dir) / "evals" / f"step-{step:06d}.json"

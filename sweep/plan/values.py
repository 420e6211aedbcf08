"""A plan's values as the TOML writes them -> as a member's environment holds them (strings),
its paths absolute, and the labels members are named by; shared by the base, the axes and the
named configurations."""
from __future__ import annotations

import math
import re
from pathlib import Path

from tatu.sweep.plan.rule import plan_error

PATH_VARIABLES = ("TATU_DATA", "TATU_SEED_CKPT", "TATU_TRUNK_CKPT")
SWEEP_OWNED = ("TATU_RUN", "TATU_OUT")


def env_value(value, path: Path, where: str) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise plan_error(path, where, f"{value} is not a finite number")
        return repr(value)
    raise plan_error(path, where, f"expected a number or a string, got {type(value).__name__}")


def resolve_paths(env: dict[str, str], base_dir: Path) -> dict[str, str]:
    out = dict(env)
    for var in PATH_VARIABLES:
        if out.get(var):
            p = Path(out[var])
            out[var] = str((p if p.is_absolute() else base_dir / p).resolve())
    return out


def config_label(values: dict[str, str]) -> str:
    """REPLAY_N=6 -> replay-n6; TATU_LR=0.001 -> lr0.001; REPLAY_SOURCES=en:0.5,pt:1/2 -> sources-en0.5-pt1of2;
    several joined with '-'."""
    parts = []
    for var, value in values.items():
        if var == "REPLAY_SOURCES":  # each source beside its share, as written
            value = "-".join(part.strip().replace(":", "").replace("/", "of") for part in value.split(","))
            parts.append(re.sub(r"[^A-Za-z0-9.-]", "-", f"sources-{value}"))
            continue
        label = var.lower().removeprefix("tatu_").replace("_", "-")
        parts.append(re.sub(r"[^A-Za-z0-9.-]", "-", f"{label}{value}"))
    return "-".join(parts)

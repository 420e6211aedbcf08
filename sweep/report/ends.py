"""Like with like: where two configurations' members ended, and whether a comparison at their ends
sets equal training against equal training.

A member that aborts ends at its abort's eval (step 8), a finished one at MIX_STEPS_LIMIT (24): a
paired difference at those ends sets 24 steps against 8. So every comparison between
configurations is made at the common step (sweep/judge/common_step.py) where it exists; one at
unequal ends is printed only with both ends and why (`24 vs 8 (aborted at 8)`), and the prose gives
it no direction. Where configurations train different SFT tokens per step (SFT_GE, micro-batch,
sequence length) the common point is equal SFT tokens seen, each configuration at its own step, and
the title and each row say so ("at equal SFT tokens: 12,288"; common_step.comparison_point).
"""
from __future__ import annotations

from tatu.sweep.judge.common_step import end_text, equal_ends
from tatu.sweep.judge.records import ConfigResult

__all__ = ["baseline_of", "common_title", "end_text", "ends_vs", "equal_ends"]


def baseline_of(configs) -> ConfigResult | None:
    return next((c for c in configs if c.is_baseline), None)


def ends_vs(c: ConfigResult, baseline: ConfigResult) -> str:
    """A comparison's step cell at the ends: `24` where both ended there, else both ends and why."""
    if equal_ends(c, baseline):
        return str(c.end_steps[0])
    return f"{end_text(c)} vs {end_text(baseline)}: unequal ends"


def common_title(configs) -> str:
    """Where the common-step tables compare: `at step 8, the last eval step every member reached` or
    `at equal SFT tokens: 12,288 (configurations train different SFT tokens per step: each at its own step)`."""
    tokens = next((c.common_tokens for c in configs if c.common_tokens), None)
    if tokens:
        return (f"at equal SFT tokens: {tokens:,} (the configurations train different SFT tokens per step: "
                "each at its own step)")
    return f"at step {configs[0].common_step}, the last eval step every member reached"

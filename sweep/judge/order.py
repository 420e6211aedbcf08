"""Fixed-sequence testing of an ordered axis (Hsu & Berger 1999): "the smallest REPLAY_N such that ..."
tests its doses one after another, each at the full alpha, stopping at the first that does not pass.

The order starts from the end the rule does not name: for `smallest`, the largest dose first and
then down, for `largest` the smallest first and then up. The rule claims a dose is enough; a dose
further from the claim is presumed at least as good, so it is tested first, and each pass licenses
the next test at full alpha (the family-wise error of the chosen dose stays alpha: a false choice
needs the first false hypothesis in the order to pass, and every test before it is of a true one).
The first failure ends the sequence: the doses past it are not run, and the choice is the last dose
that passed (none: the rule chooses nothing)."""
from __future__ import annotations

from dataclasses import dataclass

STOPS = ("fail", "futility")


def testing_order(choose: str, values: list[str]) -> tuple[str, ...]:
    """The axis's values in the order they are tested: `smallest` from the largest, `largest` from the smallest.
    An axis of words (REPLAY_SOURCES) is ordered as the plan lists it, as the verdict orders it."""
    if choose not in ("smallest", "largest"):
        raise ValueError(f"fixed-sequence testing orders an axis (smallest|largest), not {choose!r}")
    try:
        return tuple(sorted(values, key=float, reverse=choose == "smallest"))
    except ValueError:
        return tuple(reversed(values) if choose == "smallest" else values)


@dataclass(frozen=True)
class Sequence:
    """Where a fixed sequence stands: the value getting seeds now (None once decided), the value
    chosen so far (the last pass), the first failure, and the values past it that will not run."""

    active: str | None
    chosen: str | None
    stopped_at: str | None
    not_run: tuple[str, ...]

    @property
    def decided(self) -> bool:
        return self.active is None


def fixed_sequence(order: tuple[str, ...], decisions: dict[str, str]) -> Sequence:
    """`decisions`: each tested value's rule decision so far (pass | fail | futility | continue; absent: not yet looked at)."""
    chosen = None
    for position, value in enumerate(order):
        decision = decisions.get(value, "continue")
        if decision == "pass":
            chosen = value
            continue
        if decision in STOPS:
            return Sequence(None, chosen, value, order[position + 1:])
        return Sequence(value, chosen, None, ())
    return Sequence(None, chosen, None, ())

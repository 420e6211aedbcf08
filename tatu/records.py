"""The changes with a CI that tatu's records carry, with their scale in their type.

The convention for every record (daemon/records.py, sweep/judge/records.py): a frozen dataclass; JSON
only at a file boundary, through the record's `to_json` and `from_json`, and a file format's
version in the file (`FORMAT_KEY`). A reader takes every version tatu ever wrote; a file without
the key is version 1, what tatu wrote before files had versions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tatu.formats import fmt_ci

FORMAT_KEY = "format_version"


def format_version(payload: dict, what: str, newest: int) -> int:
    """The version a file's JSON object says it has (1 without the key); a version newer than this
    code reads is refused, naming the file or record `what`."""
    version = payload.get(FORMAT_KEY, 1)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= newest:
        raise ValueError(f"{what}: {FORMAT_KEY} {version!r} is not one this tatu reads (1..{newest})")
    return version


@dataclass(frozen=True)
class RelativeChange:
    """new/old - 1 with its 95% CI, all three on the relative scale (0.012 is +1.2%)."""

    value: float | None
    lo: float | None
    hi: float | None

    def text(self) -> str:
        """"+8.1% [+7.1%,+9.3%]", as every line and table writes a change."""
        return fmt_ci(self.value, self.lo, self.hi)

    def includes_zero(self) -> bool:
        return self.lo <= 0 <= self.hi


@dataclass(frozen=True)
class LogRatio:
    """log(new/old) with its 95% CI, all three on the log scale (what the crossed model estimates)."""

    value: float
    lo: float
    hi: float

    def relative(self) -> RelativeChange:
        return RelativeChange(math.expm1(self.value), math.expm1(self.lo), math.expm1(self.hi))

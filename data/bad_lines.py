"""--on-bad-line: a bad line stops the build with its FILE:LINE (error, exit 65), or is recorded
and skipped (skip); the manifest lists every skipped one."""
from __future__ import annotations

from tatu.data.manifest import DataError
from tatu.data.sft import BadLine


class BadLines:
    """Stops at the first bad line (error) or records every one of them (skip)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.lines: list[BadLine] = []

    def handle(self, bad: BadLine) -> None:
        if self.mode == "error":
            raise DataError(str(bad))
        self.lines.append(bad)

    def record(self) -> dict:
        return {"count": len(self.lines),
                "lines": [{"path": b.path, "line": b.line, "reason": b.reason} for b in self.lines]}

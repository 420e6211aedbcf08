"""The sweep layer's expected failures: one line for the operator and the exit code it means.

TatuExit (tatu/exitcodes.py) belongs to the command line; a library layer never raises it. The
sweep has more than one code to give (78 a plan or lock, 2 usage, 1 a manager or cluster that
cannot be reached), so its error carries the code; ops/cli.py and the coordinator's own entry
point (sweep/run/coordinator.py:main) turn it into the line and the exit code."""
from __future__ import annotations


class SweepError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

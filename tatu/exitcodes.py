"""Exit codes (a design contract; units set RestartPreventExitStatus=10 11 65 78)."""
OK = 0
FORGET_ABORT = 10  # MIX_FORGET_LIMIT tripped
NONFINITE_LOSS = 11
BAD_DATA = 65  # EX_DATAERR
BAD_CONFIG = 78  # EX_CONFIG
USAGE = 2


class TatuExit(Exception):
    """An expected failure: one line for the operator and its documented exit code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

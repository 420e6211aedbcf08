"""Exit codes (a design contract; units set RestartPreventExitStatus=10 11 65 78)."""
OK = 0
FORGET_ABORT = 10  # MIX_FORGET_LIMIT tripped
NONFINITE_LOSS = 11
BAD_DATA = 65  # EX_DATAERR
BAD_CONFIG = 78  # EX_CONFIG
USAGE = 2
# What a restart cannot fix: the unit's RestartPreventExitStatus= lists exactly these.
NOT_RESTARTED = (FORGET_ABORT, NONFINITE_LOSS, BAD_DATA, BAD_CONFIG)


class TatuExit(Exception):
    """An expected failure of a command line (ops/): one line for the operator and its exit code.

    The library layers raise their own exceptions instead; tatu.daemon.main maps them."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

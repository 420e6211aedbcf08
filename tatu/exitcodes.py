"""Exit codes (a design contract; units set RestartPreventExitStatus=10 11 65 74 75 78)."""
OK = 0
FORGET_ABORT = 10  # MIX_FORGET_LIMIT tripped
NONFINITE_LOSS = 11  # a non-finite loss, gradient, weight or eval: nothing non-finite is ever saved
CRASH = 1  # a bug: the traceback is logged and systemd restarts the run
BAD_DATA = 65  # EX_DATAERR
RUN_DIR_BUSY = 75  # EX_TEMPFAIL: the run is already running: another daemon holds its dir or its control socket (two units, or a unit and a foreground run, on one run)
IO_ERROR = 74  # EX_IOERR: the disk refused a save or a log write (full, read-only); the previous state is intact
BAD_CONFIG = 78  # EX_CONFIG
USAGE = 2
NO_CHOICE = 1  # a command's decision rule that nothing satisfies: said, nothing written (`tatu interpolate --pick`)
NO_MANAGER = 1  # `tatu units install`: everything written, but no user manager read it (the line names the fix)
NO_ANSWER = 1  # `tatu status`: no daemon answers and no run directory holds the run (a run that never existed)
# A command's ends that are not a run's outcome (no unit lists them), the shell's 128 + signal:
INTERRUPTED = 130  # SIGINT: a second Ctrl-C on a foreground `tatu run` (the first saves, exit 0); Ctrl-C on `tatu status`
CLOSED_PIPE = 141  # SIGPIPE: a `tatu` command whose stdout reader went away (`tatu status --json | head -1`), quiet
# What a restart cannot fix: the unit's RestartPreventExitStatus= lists exactly these.
NOT_RESTARTED = (FORGET_ABORT, NONFINITE_LOSS, BAD_DATA, IO_ERROR, RUN_DIR_BUSY, BAD_CONFIG)


class TatuExit(Exception):
    """An expected failure of a command line (ops/): one line for the operator and its exit code.

    The library layers raise their own exceptions instead: tatu.daemon.main maps them, and the
    few that carry their own code (tatu.envfile.EnvFileError, tatu.sweep.errors.SweepError) are
    turned into the line and the code by ops/cli.py."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

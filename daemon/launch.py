"""`python -m tatu.daemon.launch [torchrun's arguments]`: torchrun running `-m tatu.daemon`, with
the run's exit code passed through. What the DDP unit runs.

torchrun itself is the launcher (its argument parser, rendezvous, agent and worker monitor);
this adds what systemd needs and torchrun does not give (measured with torch 2.13):
- torchrun exits 1 whatever a worker's code: here a failed run exits with rank 0's code when it
  is one of the documented ones (10 forget abort, 11 non-finite loss, 65 bad data, 74 disk
  full, 78 bad configuration: every rank reached the same decision, or rank 0 alone could not start), else
  with the first failure's code (a signal N as 128 + N), so RestartPreventExitStatus works.
- on SIGTERM torchrun signals the workers but then exits 1 even when they stopped cleanly: here
  SIGTERM (and SIGINT, Ctrl-C: the workers are in their own sessions) is relayed to the workers
  as SIGTERM; their ranks agree on a step boundary, save and exit 0, and the agent sees a run
  that succeeded (exit 0) or failed (its code).
"""
from __future__ import annotations

import os
import signal
import sys

from tatu import exitcodes

RUN_CODES = exitcodes.NOT_RESTARTED


def run_exit_code(failures: dict) -> int:
    """The launcher's exit code from torchrun's {global rank: ProcessFailure}: rank 0's run code (the
    contract's: its decision), else another rank's (the earliest): a rank that found bad data exits 65
    while its peers, their collective cut, die with 1 (gloo: "Connection closed by peer"), and which of
    those torchrun stamps first is a race; else the first failure."""
    def code(failure) -> int:
        return 128 - failure.exitcode if failure.exitcode < 0 else failure.exitcode or 1

    if 0 in failures and code(failures[0]) in RUN_CODES:
        return code(failures[0])
    decided = [f for f in failures.values() if code(f) in RUN_CODES]
    first = min(decided or failures.values(), key=lambda f: f.timestamp)
    return code(first)


def _relay_sigterm(signum, _frame) -> None:
    import psutil

    workers = psutil.Process().children()
    if not workers:  # still in rendezvous: nothing to save yet, stop as the plain signal would
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    for worker in workers:
        try:
            worker.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = list(sys.argv[1:] if argv is None else argv)
    if "-m" in args or "--module" in args or any(a.endswith(".py") for a in args):
        print("tatu.daemon.launch: give torchrun's options only; it always runs -m tatu.daemon", file=sys.stderr)
        return exitcodes.USAGE
    # SIGTERM and SIGINT (Ctrl-C) are ours to relay as a stop (torchrun would turn a clean stop
    # into exit 1); SIGHUP and SIGQUIT stay torchrun's.
    instance = []  # `--instance NAME` (the unit's %i) goes to every rank's daemon, not to torchrun
    if "--instance" in args:
        at = args.index("--instance")
        instance, args = args[at:at + 2], args[:at] + args[at + 2:]
    parsed = parse_args([*args, "--signals-to-handle=SIGHUP,SIGQUIT", "-m", "tatu.daemon", *instance])
    signal.signal(signal.SIGTERM, _relay_sigterm)
    signal.signal(signal.SIGINT, _relay_sigterm)
    try:
        run(parsed)
    except ChildFailedError as exc:
        code = run_exit_code(exc.failures)
        ranks = ", ".join(f"rank {r}: exit {f.exitcode}" for r, f in sorted(exc.failures.items()))
        print(f"tatu.daemon.launch: the run failed ({ranks}); exiting {code}", file=sys.stderr)
        return code
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())

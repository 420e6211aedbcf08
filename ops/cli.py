"""`tatu`: the operator's command line.

Subcommands are imported only when used, so `tatu run` can reject a bad configuration
(exit 78) before torch is even imported.
"""
from __future__ import annotations

import argparse
import importlib
import os
import select
import sys

from tatu import __version__
from tatu.daemon.run.paths import EVENTS
from tatu.envfile import EnvFileError
from tatu.exitcodes import CLOSED_PIPE, USAGE, TatuExit
from tatu.model import cpu_sums
from tatu.sweep.errors import SweepError

# name -> (module, add-arguments function, main function, one-line help)
COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "tokenizer": ("tatu.ops.tokenizer_cli", "add_tokenizer_args", "tokenizer_main", "train a char or BPE tokenizer (tatu tokenizer train)"),
    "data": ("tatu.ops.data_cli", "add_data_args", "data_main", "build a data dir: token shards, SFT pairs, eval sets (build, demo)"),
    "eval": ("tatu.ops.eval.cli", "add_eval_args", "eval_main", "score a checkpoint on eval sets: ppl, bpc, bpb, 95% CI"),
    "compare": ("tatu.ops.eval.cli", "add_compare_args", "compare_main", "two checkpoints on the same lines: paired ratio, CI, p"),
    "interpolate": ("tatu.ops.interpolate.cli", "add_args", "main", "the path between a seed and its fine-tune (WiSE-FT): scores, CIs, --pick"),
    "generate": ("tatu.ops.generate", "add_args", "main", "continue prompts with a checkpoint (batched, KV cache)"),
    "run": ("tatu.ops.run_cli", "add_args", "main", "run the daemon in the foreground (config from the environment)"),
    "smoke": ("tatu.ops.run_cli", "add_smoke_args", "smoke_main", "the same config for 2 steps, eval every step, separate run dir"),
    "status": ("tatu.ops.status", "add_status_args", "status_main", "a run's state: its daemon over the control socket, else its run directory; no run: every run tatu knows"),
    "doctor": ("tatu.ops.doctor.cli", "add_doctor_args", "doctor_main", "check the unit and the host against what kills runs"),
    "units": ("tatu.ops.units", "add_units_args", "units_main", "install the systemd user units (tatu units install --run NAME)"),
    "report": ("tatu.ops.report.page", "add_args", "main", f"plots and an HTML page from runs' {EVENTS}"),
    "export": ("tatu.ops.export", "add_args", "main", "a checkpoint as a transformers GPT-2 directory (--format hf)"),
    "sweep": ("tatu.sweep.run.cli", "add_args", "main", "pre-registered sweeps over seeds and knobs (plan, start, status, stop, report)"),
    "tensorboard": ("tatu.ops.tensorboard_cli", "add_args", "main", f"TensorBoard event files from runs' {EVENTS} and sweeps' members"),
}


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: tatu [--version] [--help] COMMAND [ARGS]", "", "commands:"]
    lines += [f"  {name:<{width}}  {spec[3]}" for name, spec in COMMANDS.items()]
    lines += ["", "`tatu COMMAND --help` describes each command."]
    return "\n".join(lines)


def _stdout_reader_gone() -> bool:
    """True when nobody reads our stdout any more (a pipe or socket whose other end closed)."""
    try:
        poller = select.poll()
        poller.register(sys.__stdout__.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # inside the try: a buffered stdout fails here, not at interpreter exit
        return code
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # a pipe other than stdout broke: that is a real error
        # Quiet, as any Unix tool on a closed pipe; stdout goes to /dev/null so the
        # interpreter's own flush at exit finds nothing to complain about.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
        os.close(devnull)
        return CLOSED_PIPE


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else USAGE
    if argv[0] == "--version":
        print(f"tatu {__version__}")
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"tatu: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return USAGE
    module_name, add_name, main_name, help_text = COMMANDS[name]
    cpu_sums.request()  # before any matmul of the command: scores and runs reproduce to the bit
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"tatu {name}", description=help_text)
    getattr(module, add_name)(parser)
    args = parser.parse_args(argv[1:])
    try:
        return int(getattr(module, main_name)(args) or 0)
    except TatuExit as exc:
        print(f"tatu {name}: {exc.message.removeprefix('tatu: ')}", file=sys.stderr)
        return exc.code
    except (EnvFileError, SweepError) as exc:  # the library layers' errors that carry their exit code
        print(f"tatu {name}: {str(exc).removeprefix('tatu: ')}", file=sys.stderr)
        return exc.code
    except Exception as exc:  # a layer's expected failure has its exit code; anything else is a bug
        from tatu.daemon.main import exit_code_for

        code = exit_code_for(exc)
        if code is None:
            raise
        print(f"tatu {name}: {str(exc).removeprefix('tatu: ')}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())

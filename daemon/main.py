"""Entry points of the daemon: `tatu run`, `tatu smoke`, `python -m tatu.daemon [--instance NAME]`.

SIGTERM/SIGINT handlers come first (daemon/signals.py), then the configuration, validated
before torch is imported: a typo exits 78 in well under 2 s and leaves nothing on disk.
Expected failures are each layer's own exception; exit_codes() maps them to the design's exit
codes, here and nowhere else. Anything else is a bug: its traceback is logged at error
priority (journald's err, so `journalctl -p err` shows it) and the exit is 1, which systemd
restarts.

`--instance NAME` is what a template unit passes (`tatu-sft@NAME`): the instance names the
run. An EnvironmentFile cannot override a command line, so a TATU_RUN there that names
another run is a configuration error (78) instead of a silent run of that other run.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import Mapping, Sequence

from tatu import exitcodes
from tatu.daemon import signals
from tatu.daemon.ci_covers import run_env_file
from tatu.daemon.config import ConfigError, RunConfig, check_env_file, describe, load_layers
from tatu.daemon.run.paths import RunDir
from tatu.data.manifest import DataConfigError, DataError
from tatu.storage import StorageError

Layers = Sequence[tuple[str, Mapping[str, str]]]


def exit_codes() -> tuple[tuple[type[BaseException], int], ...]:
    """(exception, exit code), the first match wins. A new expected failure: one line here."""
    # These import torch: only once the config is valid.
    from tatu.daemon.actions import NonFiniteError
    from tatu.daemon.run.lock import RunDirBusy
    from tatu.model.checkpoint import CheckpointError, NonFiniteTensorError

    return (
        (ConfigError, exitcodes.BAD_CONFIG),
        (DataConfigError, exitcodes.BAD_CONFIG),  # data fine in itself that does not fit the run
        (DataError, exitcodes.BAD_DATA),  # eval sets (evals.sets.EvalSetError) included
        (NonFiniteError, exitcodes.NONFINITE_LOSS),
        (NonFiniteTensorError, exitcodes.NONFINITE_LOSS),
        (CheckpointError, exitcodes.BAD_DATA),
        (StorageError, exitcodes.IO_ERROR),
        (RunDirBusy, exitcodes.RUN_DIR_BUSY),
    )


def exit_code_for(exc: BaseException) -> int | None:
    """The documented exit code of an expected failure; None for a bug."""
    return next((code for kind, code in exit_codes() if isinstance(exc, kind)), None)


def env_file_locator(env_file: str | Path | None):
    """locate(variable, label) for load_layers: `FILE:LINE` where the run's env file set the value
    (read by `--env-file`, or by the unit's EnvironmentFile=, which reaches the process as its
    environment), None elsewhere."""
    from tatu.envfile import EnvFileError, parse_env_file_lines

    try:
        lines = parse_env_file_lines(Path(env_file)) if env_file and Path(env_file).is_file() else {}
    except EnvFileError:
        lines = {}

    def locate(variable: str, label: str) -> str | None:
        return f"{env_file}:{lines[variable][1]}" if variable in lines and label in ("env-file", "env") else None

    return locate


def configure(layers: Layers, instance: str | None, smoke: bool, locate=None) -> tuple[RunConfig, dict[str, str]]:
    config, origins = load_layers(layers, locate)
    if instance is not None:
        if origins["TATU_RUN"] != "default" and config.run != instance:
            raise ConfigError(f"TATU_RUN={config.run} [{origins['TATU_RUN']}] contradicts the unit's instance "
                              f"{instance} (tatu-sft@{instance}): the instance names the run; remove TATU_RUN "
                              f"from the env file or set it to {instance}")
        layers = [*layers, ("instance", {"TATU_RUN": instance})]
        config, origins = load_layers(layers, locate)
    if smoke:
        # The operator's "did the variable reach the process" check: same config, a few
        # steps, an eval each step, a separate run dir that is always fresh.
        steps = next((layer["MIX_STEPS_LIMIT"] for label, layer in reversed(layers)
                      if label == "override" and layer.get("MIX_STEPS_LIMIT")), "2")
        layers = [*layers, ("smoke", {"TATU_RUN": f"{config.run}-smoke", "EVAL_EVERY": "1", "MIX_STEPS_LIMIT": steps})]
        config, origins = load_layers(layers, locate)
    from_data = data_defaults(config, origins)
    if from_data:
        config, origins = load_layers([*layers, ("data", from_data)], locate)
    return config, origins


def data_defaults(config: RunConfig, origins: dict[str, str]) -> dict[str, str]:
    """What the data decides unless a variable does: TATU_SEQ_LEN is the length the data was built
    for (`tatu data build --seq-len`, its manifest's options.seq_len), so pairs the build accepted fit the
    run; a trunk from scratch gets a TATU_BLOCK_SIZE that holds it. Labelled [data] where the run
    prints its configuration. A manifest that cannot be read leaves the defaults: the start's own
    check says what is wrong with it."""
    import json

    try:
        built_for = json.loads((config.data / "manifest.json").read_text(encoding="utf-8"))["options"]["seq_len"]
    except (OSError, ValueError, LookupError, TypeError):
        return {}
    if not isinstance(built_for, int) or isinstance(built_for, bool) or built_for < 2:
        return {}
    derived = {}
    seq_len = config.seq_len
    if origins.get("TATU_SEQ_LEN") == "default" and built_for != config.seq_len:
        derived["TATU_SEQ_LEN"] = str(built_for)
        seq_len = built_for
    if origins.get("TATU_BLOCK_SIZE") == "default" and config.seed_ckpt is None and seq_len > config.block_size:
        derived["TATU_BLOCK_SIZE"] = str(seq_len)
    return derived


def check_start_paths(config: RunConfig, origins: dict[str, str], fresh: bool) -> None:
    """The data, and the seed and trunk a new run reads, exist: refused (65) before torch loads, which takes
    5-9 s on a loaded machine where a bad variable takes 0.6 s. A restart reads neither (its
    resume state holds the weights and the trunk's scores), so a moved seed does not stop it.
    TATU_DATA every run reads, a restart too."""
    if not config.data.is_dir():
        what = "not a directory" if config.data.exists() else f"no directory {config.data.absolute()}"
        raise DataError(f"TATU_DATA={config.data} [{origins.get('TATU_DATA', '?')}]: no such data directory "
                        f"({what}; `tatu data build` writes one)")
    if not fresh and RunDir(config.run_dir).has_resume():
        return
    for variable, path in (("TATU_SEED_CKPT", config.seed_ckpt), ("TATU_TRUNK_CKPT", config.trunk_ckpt)):
        if path is not None and not path.exists():
            raise DataError(f"{variable}={path} [{origins.get(variable, '?')}]: no such checkpoint "
                            f"(no file or directory {path.absolute()})")


def main(environ: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None, smoke: bool = False,
         *, layers: Layers | None = None, instance: str | None = None, env_file: Path | None = None,
         command: str = "tatu") -> int:
    """The daemon. Its variables: `layers` ((label, mapping), later wins), else `environ`
    (default: the process environment) then `overrides`; `env_file`, the file one layer was read
    from (`tatu run/smoke --env-file`), else the unit's own when `instance` names one. `command`
    begins each line it refuses with (`tatu run`, `tatu smoke`)."""
    signals.install()
    try:
        return _main(environ, overrides, smoke, layers, instance, run_env_file(instance, env_file), command)
    except KeyboardInterrupt:
        print(f"{command}: interrupted twice: exiting without saving (the last saved state stays)", file=sys.stderr)
        return exitcodes.INTERRUPTED
    finally:
        signals.uninstall()


def _main(environ, overrides, smoke, layers, instance, env_file: str | None, command: str = "tatu") -> int:
    import os

    from tatu.daemon.logs import priority_prefix

    if layers is None:
        layers = [("env", os.environ if environ is None else environ), ("override", overrides or {})]
    try:
        if env_file is not None and Path(env_file).is_file():
            # Every name in it is tatu's (file and line named), before the layers it fed are read. A file
            # not here (a Ray member's, written on another node) leaves the environment's own check.
            check_env_file(Path(env_file))
        config, origins = configure(layers, instance, smoke, env_file_locator(env_file))
    except ConfigError as exc:
        print(f"{priority_prefix('error', sys.stderr)}{command}: {exc}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    try:
        check_start_paths(config, origins, fresh=smoke)
    except DataError as exc:
        print("\n".join(describe(config, origins)))  # where each value came from, as a started run prints it
        print(f"{priority_prefix('error', sys.stderr)}{command}: {exc}", file=sys.stderr)
        return exitcodes.BAD_DATA

    from tatu.daemon.notify import Notifier

    Notifier().status("loading")  # before torch loads: `systemctl status` says what is taking time

    from tatu.daemon.logs import RunLog
    from tatu.daemon.loop import run

    log = RunLog(None)
    try:
        return run(config, origins, log, fresh=smoke, env_file=env_file)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        code = exit_code_for(exc)
        if code is None:  # a bug: the whole traceback, at error priority, then a crash exit
            for line in traceback.format_exc().rstrip().splitlines():
                log.error(line)
            return exitcodes.CRASH
        log.error(str(exc))
        if code in (exitcodes.BAD_DATA, exitcodes.BAD_CONFIG):
            # the run's end in its events, by exit class, for whoever reads the run dir (daemon/run/view.py);
            # a non-finite end logged its abort with its code already, a busy run dir is another daemon's
            try:
                log.event("exit", code=code, reason=str(exc))
            except StorageError:
                pass
        return code
    finally:
        log.close()


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tatu.daemon", description="the tatu training daemon")
    parser.add_argument("--instance", help="the unit instance (tatu-sft@NAME): names the run, wins over TATU_RUN")
    parser.add_argument("--env-file", type=Path, help="the file the run's variables were written to (a sweep's "
                        "backends pass the member's): its names are checked, and it is named where the run says "
                        "what its CIs cover; the variables themselves come from the environment")
    args = parser.parse_args(argv)
    return main(instance=args.instance, env_file=args.env_file)


if __name__ == "__main__":
    sys.exit(cli())

"""Entry points of the daemon: `tatu run`, `tatu smoke`, `python -m tatu.daemon`.

The configuration is validated before torch is imported: a typo exits 78 in well under 2 s
and leaves nothing on disk. Expected failures are each layer's own exception; EXIT_CODES maps
them to the design's exit codes, here and nowhere else. Anything else is a bug: a traceback
and exit 1, which systemd restarts.
"""
from __future__ import annotations

import shutil
import sys
from typing import Mapping

from tatu import exitcodes
from tatu.daemon.config import ConfigError, load_config
from tatu.data.manifest import DataConfigError, DataError


def exit_codes() -> tuple[tuple[type[BaseException], int], ...]:
    """(exception, exit code), the first match wins. A new expected failure: one line here."""
    from tatu.model.checkpoint import CheckpointError  # imports torch: only once the config is valid

    return (
        (ConfigError, exitcodes.BAD_CONFIG),
        (DataConfigError, exitcodes.BAD_CONFIG),  # data fine in itself that does not fit the run
        (DataError, exitcodes.BAD_DATA),  # eval sets (evals.sets.EvalSetError) included
        (CheckpointError, exitcodes.BAD_DATA),
    )


def exit_code_for(exc: BaseException) -> int | None:
    """The documented exit code of an expected failure; None for a bug."""
    return next((code for kind, code in exit_codes() if isinstance(exc, kind)), None)


def main(environ: Mapping[str, str] | None = None, overrides: dict[str, str] | None = None, smoke: bool = False) -> int:
    try:
        config, origins = load_config(environ, **(overrides or {}))
        if smoke:
            # The operator's "did the variable reach the process" check: same config,
            # a few steps, an eval each step, a separate run dir that is always fresh.
            smoke_overrides = {"TATU_RUN": f"{config.run}-smoke", "EVAL_EVERY": "1",
                               "MIX_STEPS_LIMIT": (overrides or {}).get("MIX_STEPS_LIMIT", "2")}
            config, origins = load_config(environ, **{**(overrides or {}), **smoke_overrides})
    except ConfigError as exc:
        from tatu.daemon.logs import priority_prefix

        print(f"{priority_prefix('error', sys.stderr)}tatu: configuration error: {exc}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    if smoke and config.run_dir.exists():
        shutil.rmtree(config.run_dir)

    from tatu.daemon.logs import RunLog
    from tatu.daemon.loop import run

    log = RunLog(None)
    try:
        return run(config, origins, log)
    except Exception as exc:
        code = exit_code_for(exc)
        if code is None:
            raise
        log.error(str(exc))
        return code
    finally:
        log.close()


if __name__ == "__main__":
    sys.exit(main())

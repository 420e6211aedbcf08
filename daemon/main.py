"""Entry points of the daemon: `tatu run`, `tatu smoke`, `python -m tatu.daemon`.

The configuration is validated before torch is imported: a typo exits 78 in well under 2 s
and leaves nothing on disk.
"""
from __future__ import annotations

import shutil
import sys
from typing import Mapping

from tatu import exitcodes
from tatu.daemon.config import ConfigError, load_config
from tatu.exitcodes import TatuExit


def main(environ: Mapping[str, str] | None = None, overrides: dict[str, str] | None = None, smoke: bool = False) -> int:
    try:
        config, sources = load_config(environ, **(overrides or {}))
        if smoke:
            # The operator's "did the variable reach the process" check: same config,
            # a few steps, an eval each step, a separate run dir that is always fresh.
            smoke_overrides = {"TATU_RUN": f"{config.run}-smoke", "EVAL_EVERY": "1",
                               "MIX_STEPS_LIMIT": (overrides or {}).get("MIX_STEPS_LIMIT", "2")}
            config, sources = load_config(environ, **{**(overrides or {}), **smoke_overrides})
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
        return run(config, sources, log)
    except TatuExit as exc:
        log.error(exc.message)
        return exc.code
    finally:
        log.close()


if __name__ == "__main__":
    sys.exit(main())

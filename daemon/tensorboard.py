"""TATU_TENSORBOARD: where a run's TensorBoard event files go, and the sink that writes them.

    auto  RUN_DIR/tb when the tensorboard package imports; otherwise off, said in one line
    off   nothing is written
    DIR   DIR/TATU_RUN (a dir several runs share, for one `tensorboard --logdir DIR`)

The sink is tatu.tensorboard's writer, fed the records the events file gets (RunLog.add_sink). When
it is attached it first catches up from the run's events file, so a restart writes what a kill
(or an earlier start with TATU_TENSORBOARD=off) left out, and skips what the dir already holds.
The loop attaches it on rank 0 alone. A failure is a warning, never the run's end.
"""
from __future__ import annotations

from pathlib import Path

from tatu.daemon.config import RunConfig
from tatu.daemon.run.paths import RunDir
from tatu.tensorboard.writer import TensorBoardWriter, unavailable


def log_dir_for(config: RunConfig, origin: str = "default") -> tuple[Path | None, str]:
    """(the run's TensorBoard dir or None, the line that says which and why)."""
    setting = f"TATU_TENSORBOARD={config.tensorboard} [{origin}]"
    if config.tensorboard == "off":
        return None, f"TensorBoard: off ({setting})"
    if config.tensorboard == "auto":
        missing = unavailable()
        if missing:
            return None, f"TensorBoard: off ({setting}: {missing}; `pip install tensorboard` turns it on)"
        return RunDir(config.run_dir).tb, f"TensorBoard: {RunDir(config.run_dir).tb} ({setting})"
    where = Path(config.tensorboard) / config.run
    return where, f"TensorBoard: {where} ({setting})"


def attach(config: RunConfig, origins: dict[str, str], log) -> TensorBoardWriter | None:
    """Say where TensorBoard goes; from now on write every event record there too."""
    where, line = log_dir_for(config, origins.get("TATU_TENSORBOARD", "default"))
    log.info(line)
    if where is None:
        return None
    writer = TensorBoardWriter(where, log.warning)
    writer.catch_up(RunDir(config.run_dir).events())
    if not writer.active:
        return None
    log.add_sink(writer)
    return writer

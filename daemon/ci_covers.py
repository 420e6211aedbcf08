"""What a single run's CIs cover, said in one place: the verdict line, the verdict file, the eval
events, `tatu status` and the run report all carry the record built here.

A run's CIs are bootstraps over the lines of its eval sets: they cover one source of noise,
which lines the sets hold. They do not cover the run's own randomness (the data order, dropout,
an adapter's or a fresh trunk's init, all drawn from TATU_SEED, and the order the machine sums
floats in), and for drift that is the larger one (docs/metrics.md#what-a-single-runs-ci-covers).
Only seeds measure it, so the record names the command that runs this configuration at several,
or, for a run that is already one seed of a sweep, the command that shows its sweep's report.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from tatu.daemon.config import RunConfig
from tatu.daemon.run.records import SetSummary
from tatu.systemctl import unit_env_dir

SEEDS_SUGGESTED = 3  # the fewest seeds the sweep's crossed CI and outlier flags work with
ENV_FILE_PLACEHOLDER = "<run>.env"  # when the daemon was not given its variables by a file


@dataclass(frozen=True)
class SetLines:
    name: str
    scored: int  # the lines a CI resamples
    total: int  # the set's lines (more than scored only for a subsampled ruler)

    def text(self) -> str:
        return f"{self.scored}{'' if self.scored == self.total else f' of {self.total}'} {self.name}"


SWEEP_RUNS = "runs"  # a sweep's members' TATU_OUT, under its directory


@dataclass(frozen=True)
class SweepOf:
    """The sweep a run is a member of, as its sweep laid it out: TATU_OUT=SWEEPS/NAME/runs and
    TATU_RUN=NAME.MEMBER (sweep/plan's members; tests/ops/test_printed_commands.py holds the two to
    the same layout)."""

    name: str
    sweeps: Path  # the directory `tatu sweep ... --sweeps` takes

    @property
    def report_command(self) -> str:
        return f"tatu sweep report {self.name} --sweeps {self.sweeps}"

    @staticmethod
    def member_dir(sweeps: Path, run: str) -> Path:
        """Where a member named `run` (NAME.MEMBER) of a sweep in `sweeps` has its run directory."""
        return Path(sweeps) / run.split(".", 1)[0] / SWEEP_RUNS / run


def sweep_of(run: str, out: Path) -> SweepOf | None:
    """The sweep run `run` under TATU_OUT `out` is a member of; None for a run of its own."""
    out = Path(out).absolute()
    name = out.parent.name
    if out.name == SWEEP_RUNS and name and run.startswith(f"{name}."):
        return SweepOf(name, out.parent.parent)
    return None


@dataclass(frozen=True)
class CiCovers:
    sets: tuple[SetLines, ...]
    not_included: tuple[str, ...]  # the run-to-run sources of this configuration
    env_file: str | None
    mode: str = "sft"
    sweep: SweepOf | None = None  # the sweep this run is a seed of: it measures the variation already

    @property
    def command(self) -> str | None:
        """The command that measures what is not included (`tatu sweep start`, issue 26 item 4), or that
        shows it for a sweep's member (`tatu sweep report`); None for a run `tatu sweep start` would
        refuse (`--env-file --seeds` judges an SFT run's criteria: not a pretrain run)."""
        if self.sweep is not None:
            return self.sweep.report_command
        if self.mode != "sft":
            return None
        return f"tatu sweep start --env-file {self.env_file or ENV_FILE_PLACEHOLDER} --seeds {SEEDS_SUGGESTED}"

    @property
    def measured_by(self) -> str:
        if self.sweep is not None:
            return f"this run is one seed of the sweep {self.sweep.name}: `{self.command}` shows it"
        return (f"{self.command} measures it" if self.command
                else f"a sweep plan with this configuration at several seeds measures it, docs/sweeps.md")

    @property
    def text(self) -> str:
        """One line, short enough for the journal."""
        parts = [s.text() for s in self.sets]
        listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        many = len(parts) > 1
        return (f"CI{'s' if many else ''} over the {listed} line{'s' if many or self.sets[0].scored != 1 else ''}; "
                f"run-to-run variation not included ({self.measured_by})")

    def to_json(self) -> dict:
        return {"text": self.text, "lines": {s.name: s.scored for s in self.sets},
                "lines_total": {s.name: s.total for s in self.sets}, "covers": "which lines the eval sets hold",
                "not_included": list(self.not_included), "env_file": self.env_file, "measured_by": self.command}


def run_to_run_sources(config: RunConfig) -> tuple[str, ...]:
    """What differs between two runs of this configuration at other TATU_SEEDs (or machines)."""
    lora = config.train_spec.lora
    sources = ["data order"]
    if config.mode == "pretrain" and config.seed_ckpt is None:
        sources.append("weight init")
    if lora is not None:
        sources.append("adapter init")
    if config.dropout > 0 or (lora is not None and lora.dropout > 0):
        sources.append("dropout")
    sources.append("float summation order (threads, kernels, CPU)")
    return tuple(sources)


def ci_covers(sets: Mapping[str, SetSummary], names, config: RunConfig, env_file: str | None) -> CiCovers:
    """The record for the CIs of `names` (in that order), from an eval record's `sets` summaries."""
    lines = tuple(SetLines(name, int(sets[name].n_lines), int(sets[name].n_lines_total))
                  for name in names if name in sets)
    return CiCovers(lines, run_to_run_sources(config), env_file, config.mode, sweep_of(config.run, config.out))


def run_env_file(instance: str | None, given: Path | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The env file the run's variables came from: the one `tatu run/smoke --env-file` was given,
    else TATU_ENV_FILE (the units set it to their EnvironmentFile, %E expanded by systemd itself),
    else under a unit installed before they did (`--instance NAME`) %E/tatu/NAME.env as this
    process's XDG_CONFIG_HOME places it, when it exists; None when the daemon cannot know (the
    variables came from a shell)."""
    env = os.environ if environ is None else environ
    if given is not None:
        return str(Path(given).absolute())
    if env.get("TATU_ENV_FILE"):
        return env["TATU_ENV_FILE"]
    if instance is None:
        return None
    path = unit_env_dir(env) / f"{instance}.env"
    return str(path) if path.is_file() else None

"""The report's input: each run as its events and stored config tell it, and how the
report writes each kind of number read from them.

The evals and the verdict are the daemon's typed records (daemon/run/records.py: EvalRecord,
Verdict), read from the events file by their own from_json. Nothing is recomputed: the page shows
exactly what the daemon measured and decided.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tatu.daemon.run.paths import BEST, FINAL, STATE, RunDir
from tatu.daemon.run.records import EvalRecord, Verdict
from tatu.daemon.run.view import FINISHED, RunView, read_run
from tatu.exitcodes import BAD_DATA, TatuExit
from tatu.model.checkpoint.files import META, CheckpointError, read_meta, resolve_checkpoint
from tatu.formats import fmt_p as shared_fmt_p
from tatu.formats import fmt_pct as shared_fmt_pct
from tatu.formats import fmt_ppl as shared_fmt_ppl
from tatu.formats import SET_NAMES, ordered_sets

# Where a run's config may be found: the resume state, or (the run finished and its state was
# not kept) the other checkpoints that carry the same meta; each may be a `.old` twin.
CONFIG_CHECKPOINTS = (STATE, FINAL, BEST)


def report_sets(runs) -> list[str]:
    """The sets the report shows: the three roles always, then every other set a run scored
    (a held-out domain), in the order the events list them."""
    seen = [name for run in runs for record in run.evals for name in record.sets]
    return ordered_sets([*SET_NAMES, *seen])


@dataclass
class RunRecord:
    """One run as its events tell it: the run's one view (daemon/run/view.py read_run) and its stored config."""

    name: str
    run_dir: Path
    view: RunView
    config: dict | None = None  # None: no readable stored config (config_note says why)
    config_note: str = ""
    trainable: str = ""  # what trained ("trainable 1.3M of 27.1M (4.8%): h.6-7, ln_f"); "" for older runs

    @property
    def evals(self) -> tuple[EvalRecord, ...]:
        """One per step, ascending; a step evaluated twice (restart) keeps the later event."""
        return self.view.evals

    @property
    def verdict(self) -> Verdict | None:
        return self.view.verdict

    @property
    def verdict_step(self) -> int | None:
        """The step the run stood at when judged (the verdict event's step)."""
        return self.view.verdict_step

    @property
    def last_step(self) -> int | None:
        """The last optimizer step logged."""
        return self.view.last_step

    @property
    def resumes(self) -> int:
        return self.view.resumes

    @property
    def abort(self) -> tuple[int | None, str] | None:
        """(step, reason) of what ended the run when it aborted or diverged; None otherwise."""
        end = self.view.ended_by
        return None if end is None else (end.step, end.reason)

    @property
    def status(self) -> str:
        view = self.view
        end = view.ended_by
        if end is not None:
            return f"{view.state} at step {fmt_int(end.step)}: {end.reason}" + ("" if view.verdict is not None else " (no verdict)")
        if view.state == FINISHED:
            return "finished"
        return "running or stopped: no verdict yet"

    @property
    def final_eval(self) -> EvalRecord | None:
        return self.evals[-1] if self.evals else None

    @property
    def best_eval(self) -> EvalRecord | None:
        """The eval whose checkpoint is best/ (the last one flagged best)."""
        flagged = [e for e in self.evals if e.best]
        return flagged[-1] if flagged else None

    @property
    def forget_limit(self) -> float | None:
        """MIX_FORGET_LIMIT of an SFT run (a trunk cannot forget); None when unknown."""
        if not self.config or self.config.get("TATU_MODE", "sft") != "sft":
            return None
        return number(self.config.get("MIX_FORGET_LIMIT"))

    @property
    def last_generations(self) -> EvalRecord | None:
        with_generations = [e for e in self.evals if e.generations]
        return with_generations[-1] if with_generations else None




def number(value) -> float | None:
    """A JSON number as written by the run's log (non-finite floats are stored as "inf"/"-inf"/null)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("inf", "-inf"):
        return float(value)
    return None




def _trainable(meta: dict) -> str:
    """The "trainable" line of the metadata the config came from ("" when it has none), with the
    retention terms (TATU_ANCHOR / TATU_DISTILL) after it, as `tatu status` shows them."""
    try:
        terms = meta.get("seed_terms")
        return str(meta["trainable"]["line"]) + (f"; {terms['line']}" if terms else "")
    except (KeyError, TypeError):
        return ""


def _read_config(run_dir: Path) -> tuple[dict | None, dict, str]:
    """(the run's config, the metadata it came from, the file's path or why there is none): the first
    of CONFIG_CHECKPOINTS with metadata, read verified (a corrupt one is said, not read)."""
    for name in CONFIG_CHECKPOINTS:
        try:
            ckpt = resolve_checkpoint(run_dir / name)
        except CheckpointError:
            continue
        path = ckpt / META
        if not path.is_file():
            continue
        try:
            meta = read_meta(ckpt)
        except CheckpointError as exc:
            return None, {}, f"{path}: unreadable ({exc})"
        config = meta.get("config")
        if not isinstance(config, dict):
            return None, {}, f"{path}: no 'config' object"
        return config, meta, str(path)
    return None, {}, f"no {CONFIG_CHECKPOINTS[0]}/{META} in {run_dir}"


def load_run(run_dir: Path | str) -> RunRecord:
    """The run's one view (a torn last line ignored) and its stored config."""
    run_dir = Path(run_dir)
    path = RunDir(run_dir).events_file
    if not path.is_file():
        raise TatuExit(BAD_DATA, f"{path}: not found (is {run_dir} a run directory? the run writes it at its first eval)")
    try:
        view = read_run(run_dir)
    except (OSError, UnicodeDecodeError) as exc:
        raise TatuExit(BAD_DATA, f"{path}: cannot read ({exc})")
    except ValueError as exc:  # a malformed event or a format this tatu does not read: the message names the file
        raise TatuExit(BAD_DATA, str(exc)) from None
    config, meta, note = _read_config(run_dir)
    return RunRecord(name=run_dir.resolve().name, run_dir=run_dir, view=view, config=config, config_note=note,
                     trainable=_trainable(meta) if config is not None else "")



# --- formatting: one function per kind of number, used for every cell of that kind -----------

def fmt_ppl(value, set_name: str) -> str:
    return shared_fmt_ppl(number(value), set_name)


def fmt_pct(value) -> str:
    """A relative change (fraction): signed, one decimal, like the EVAL line's drift."""
    return shared_fmt_pct(number(value))


def fmt_rate(value) -> str:
    """A proportion (accuracy, invented-word rate): one decimal, unsigned."""
    x = number(value)
    return "n/a" if x is None else f"{x * 100:.1f}%"


def fmt_p(value) -> str:
    """A bootstrap p-value: "<0.001" at the floor of the default 2000 resamples."""
    return shared_fmt_p(number(value))


def fmt_int(value) -> str:
    return "n/a" if value is None else str(value)


def fmt_bpc(value) -> str:
    """Bits per character: three decimals."""
    x = number(value)
    return "n/a" if x is None else f"{x:.3f}"


FORMATS = {"ppl": fmt_ppl, "pct": fmt_pct, "rate": fmt_rate, "p": fmt_p, "int": fmt_int, "bpc": fmt_bpc}


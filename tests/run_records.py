"""Small typed run records for tests that need one without running an eval (daemon/run/records.py)."""
from __future__ import annotations

from dataclasses import replace

from tatu.daemon.run.records import Change, Criteria, EvalRecord, SetSummary, Verdict, VerdictNumbers


def set_summary(ppl: float = 10.0, n_lines: int = 100, n_lines_total: int | None = None) -> SetSummary:
    return SetSummary(ppl, ppl * 0.9, ppl * 1.1, 0.1, 1.0, 1.0, n_lines,
                      n_lines if n_lines_total is None else n_lines_total, 40 * n_lines)


def eval_record(step: int = 0, drift: float = 0.0, **fields) -> EvalRecord:
    """An eval at `step` whose drift is `drift` (CI +-1 point), every other field empty unless given."""
    record = EvalRecord(step=step, sets={"enRuler": set_summary()}, warnings=[], changes={},
                        drift=Change(drift, drift - 0.01, drift + 0.01, 0.5, 0.02), drift_tronco=None, trunk_ok=True,
                        best=False, best_set="sftHeld", abort=None, notes={}, seconds=1.0, generations=None,
                        categories={}, categories_note=None, tasks={}, ci_covers={}, line=f"EVAL {step}: ...")
    return replace(record, **fields)


def verdict(outcome: str, aborted: str | None = None) -> Verdict:
    """A finished run's verdict (`aborted`: why MIX_FORGET_LIMIT stopped it), numbers at step 8."""
    change = Change(0.0, -0.01, 0.01, 0.5, 0.02)
    numbers = VerdictNumbers(8, "sftHeld", change, change, None, 0.0, 8, aborted)
    return Verdict(outcome, Criteria("improve", "forget limit", "flat"), f"VERDICT {outcome}: ...", numbers, {})

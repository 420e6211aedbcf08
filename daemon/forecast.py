"""A run's drift forecast at each of its evals (the statistics: tatu.evals.forecast; why this
curve and what it assumes: docs/forecast.md).

What the run keeps for it: the ruler's per-line NLL sums of every eval after step 0
(RunState.ruler_lines, saved in the resume state, so a restart forecasts from the whole run);
with the step-0 baseline's, they are the trajectory the curve is fitted to. Which evals: the
ones the run's history records (evals_through), so a forecast is a function of the restored
state alone; a state without some eval's lines (saved before they were kept) forecasts nothing. The clock is the
run's cumulative learning rate (daemon/trainer.py's lr_at): under a cosine the weights move less
and less, and a curve in steps would forecast forgetting the schedule does not allow.

MIX_FORECAST_ABORT=1 ends the run (exit 10) when the forecast's lower bound at the last step
passes MIX_FORGET_LIMIT (daemon/judge.py decides it, like every abort); never before the third
eval, the first that forecasts.
"""
from __future__ import annotations

import numpy as np

from tatu.daemon.config import RunConfig
from tatu.daemon.run.state import RunState
from tatu.daemon.suite import RULER
from tatu.daemon.trainer import lr_at
from tatu.evals.forecast import MIN_EVALS, Forecast, ForecastError, Trajectory, forecast
from tatu.evals.scoring import SetResult


def evals_through(step: int, state: RunState) -> list[int] | None:
    """The steps after 0 a forecast at `step` is fitted to: every eval the run's history records up to
    it, and this one (not yet in the history); None when one of them has no kept lines (a state saved
    before they were kept). The list is the run's, not what this process saw: a restart forecasts from
    the evals an uninterrupted run does, or not at all."""
    steps = sorted({record.step for record in state.history if 0 < record.step < step} | {step})
    return steps if all(s in state.ruler_lines for s in steps) else None


class RunForecaster:
    """The forecast of one run: its clock, built once per start."""

    def __init__(self, config: RunConfig, lr_schedule_end: int | None):
        self.config = config
        self.end = config.mix_steps_limit
        lrs = np.array([lr_at(step, config, lr_schedule_end) for step in range(self.end)], dtype=np.float64)
        self._clock = np.concatenate([[0.0], np.cumsum(lrs)])  # step s has taken the updates of steps 1..s

    def clock(self, steps: np.ndarray) -> np.ndarray:
        return self._clock[np.minimum(np.asarray(steps, dtype=np.int64), self.end)]

    def at_eval(self, step: int, results: dict[str, SetResult], state: RunState) -> Forecast | None:
        """Keep this eval's ruler lines; the forecast once the run has MIN_EVALS evals (None before,
        at the last step, for a trunk, or when the ruler's lines differ from step 0's)."""
        if self.config.mode != "sft" or RULER not in results or state.baseline is None or step == 0:
            return None
        ruler, base = results[RULER], state.baseline[RULER]
        if not np.array_equal(ruler.line_index, base.line_index) or step > self.end:
            return None
        state.ruler_lines[step] = ruler.scores.nll_sum.tolist()
        steps = evals_through(step, state)
        if steps is None or len(steps) + 1 < MIN_EVALS or step == self.end:  # at the last step drift is measured
            return None
        nll = [base.scores.nll_sum.tolist()] + [state.ruler_lines[s] for s in steps]
        try:
            trajectory = Trajectory.of([0, *steps], nll, base.scores.n_tokens)
            return forecast(trajectory, self.end, self.config.mix_forget_limit, clock=self.clock,
                            seed=self.config.seed + step)
        except ForecastError:  # lines of another length kept by an older start: no forecast, never a crash
            return None

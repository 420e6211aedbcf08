"""Where a run's drift is heading: drift at its last step (or any step) with a 90% prediction
interval, and the step at which it is forecast to cross a limit, from the run's own evals.

The quantity is the ruler's log perplexity ratio against step 0,

    y(s) = log(1 + drift(s)) = sum_i (NLL_i(s) - NLL_i(0)) / sum_i T_i        (lines i, T_i target tokens)

a sum over lines, so a resample of the lines is a resample of y at every eval at once (the same
lines are scored at every eval: the resample is paired over time).

The curve (docs/forecast.md says why): a local trend of y against a clock x, in two shapes,

    y(s) = a + beta * g(x(s)),   x(s) = clock(s) / clock(end),   g = log x (slowing down) or x - 1 (steady)

each fitted by least squares to the last WINDOW evals after step 0; g(1) = 0, so a is the forecast
at the end itself, and the point forecast is the mean of the two. Forgetting that slows down is
followed by the log shape; forgetting at a steady rate by the other; which one a run follows is
not known from its first evals, so half the bootstrap curves take each. The clock is the run's
cumulative learning rate (given by the caller; the step when the learning rate is constant):
forgetting follows how far the weights moved, and a cosine schedule's last steps move them little.

The interval is a bootstrap of curves, each one:
  1. the ruler's line sampling: the lines drawn again with replacement (the same draw at every eval);
  2. the curve's own uncertainty: its shape (above); every eval's y moved by a normal draw of sd
     `sigma`, the trend refitted, and its end moved by one more such draw (the last step is one more
     noisy eval, not the smooth curve). `sigma` is the residual sd of the better-fitting shape, never
     below the ruler's resolution of one eval from the next (the line-bootstrap sd of y(last) -
     y(previous)); estimated from m evals it has m - 2 degrees of freedom, so each curve draws its
     own sigma from that estimate's distribution (scaled inverse chi-square: Student's t overall).
     With two evals there is no residual: sigma is then what y moved between them (a curve is not
     known better than it moved from one eval to the next).
`lines=False` drops 1 and the ruler's resolution: what a forecast that ignores line sampling would
say (the tests show its interval too narrow).

numpy only; no torch, no daemon: a notebook can forecast a run's curve from its evals/ files.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tatu.formats import fmt_interval, fmt_pct

LEVEL = 0.90  # the prediction interval's coverage
MIN_EVALS = 3  # the step-0 baseline and two trained evals: the first eval that forecasts is the third
WINDOW = 4  # the trained evals the trend is fitted to: the last ones (all of them while fewer)
FAMILIES = ("log", "linear")  # the trend's shapes: slowing down (log x) and steady (x); half the curves each
RESAMPLES = 1000
_CHUNK = 200  # replicates whose line weights are held at once (memory: _CHUNK x lines)
BAND_POINTS = 8  # steps from the current eval to the end that a forecast's band keeps


class ForecastError(ValueError):
    """Evals a forecast cannot be made from (too few, lines that differ between evals)."""


@dataclass(frozen=True)
class Trajectory:
    """A run's ruler at each of its evals: per-line NLL sums (one row per eval, row 0 the step-0
    baseline) over the same lines, and each line's target tokens (the same at every eval)."""

    steps: np.ndarray  # (n,) increasing, steps[0] == 0
    nll: np.ndarray  # (n, lines) nats
    tokens: np.ndarray  # (lines,)

    def __post_init__(self):
        if self.nll.ndim != 2 or self.nll.shape != (len(self.steps), len(self.tokens)):
            raise ForecastError(f"trajectory: nll has shape {self.nll.shape}, expected "
                                f"({len(self.steps)}, {len(self.tokens)})")
        if len(self.steps) and self.steps[0] != 0:
            raise ForecastError(f"trajectory: the first eval is at step {self.steps[0]}, not the step-0 baseline")
        if np.any(np.diff(self.steps) <= 0):
            raise ForecastError(f"trajectory: steps {self.steps.tolist()} are not increasing")

    @classmethod
    def of(cls, steps: Sequence[int], nll: Sequence[Sequence[float]], tokens: Sequence[int]) -> "Trajectory":
        """Lines without a scored token carry nothing and are dropped."""
        tokens_ = np.asarray(tokens, dtype=np.float64)
        keep = tokens_ > 0
        return cls(np.asarray(steps, dtype=np.int64), np.asarray(nll, dtype=np.float64)[:, keep], tokens_[keep])

    def log_ratio(self) -> np.ndarray:
        """y = log(1 + drift) at each eval after step 0."""
        return (self.nll[1:] - self.nll[0]).sum(axis=1) / self.tokens.sum()

    def resampled_log_ratio(self, rng: np.random.Generator, resamples: int) -> np.ndarray:
        """(resamples, evals after step 0): y over lines drawn with replacement, one draw for all evals."""
        deltas = (self.nll[1:] - self.nll[0]).T  # (lines, n-1)
        n_lines = len(self.tokens)
        out = np.empty((resamples, deltas.shape[1]))
        for start in range(0, resamples, _CHUNK):
            size = min(_CHUNK, resamples - start)
            weights = rng.multinomial(n_lines, np.full(n_lines, 1.0 / n_lines), size=size).astype(np.float64)
            out[start:start + size] = (weights @ deltas) / (weights @ self.tokens)[:, None]
        return out


@dataclass(frozen=True)
class BandPoint:
    """Drift forecast at one step: the fitted curve's value and the interval's ends."""

    step: int
    value: float
    lo: float
    hi: float

    def to_json(self) -> dict:
        return {"step": self.step, "value": self.value, "lo": self.lo, "hi": self.hi}

    @classmethod
    def from_json(cls, payload: dict) -> "BandPoint":
        return cls(int(payload["step"]), payload["value"], payload["lo"], payload["hi"])


@dataclass(frozen=True)
class Crossing:
    """The step drift is forecast to cross the limit at: the median over the curves and the
    interval's ends; None means "not before the end" (at that quantile the curve stays under)."""

    step: int | None
    lo: int | None
    hi: int | None

    def text(self, end: int) -> str:
        """"140 [110,>200]"; "not before the end", with the interval when its early end crosses."""
        interval = f"[{_step_text(self.lo, end)},{_step_text(self.hi, end)}]"
        if self.step is None:
            return "not before the end" + ("" if self.lo is None else f" {interval}")
        return f"{self.step} {interval}"

    def to_json(self) -> dict:
        return {"step": self.step, "lo": self.lo, "hi": self.hi}

    @classmethod
    def from_json(cls, payload: dict) -> "Crossing":
        return cls(payload.get("step"), payload.get("lo"), payload.get("hi"))


def _step_text(step: int | None, end: int) -> str:
    return f">{end}" if step is None else str(step)


@dataclass(frozen=True)
class Forecast:
    """A forecast made at eval `step` from `n_evals` evals (the step-0 baseline counted) of drift
    at the run's last step `end`, its `level` interval, when it crosses `limit`, and the band
    from `step` to `end` (drawn by the report and TensorBoard)."""

    step: int
    end: int
    value: float
    lo: float
    hi: float
    limit: float
    crossing: Crossing
    band: list[BandPoint]
    n_evals: int
    level: float = LEVEL
    lines: bool = True  # the ruler's line sampling is in the interval

    def line_extras(self) -> str:
        """What the EVAL line appends (after everything else on it):
        ` forecast@200=+6.1% forecast_ci=[+3.2%,+9.8%] forecast_cross=140[110,>200]`, the crossing
        `not-before-the-end` when the median curve stays under the limit."""
        crossing = self.crossing.text(self.end).replace("not before the end", "not-before-the-end").replace(" ", "")
        return (f" forecast@{self.end}={fmt_pct(self.value)} forecast_ci={fmt_interval(self.lo, self.hi)}"
                f" forecast_cross={crossing}")

    def describe(self) -> str:
        """`forecast drift at step 200 +6.1% [+3.2%,+9.8%] (90%, 3 evals); crosses 8.0%: not before the end`."""
        return (f"forecast drift at step {self.end} {fmt_pct(self.value)} {fmt_interval(self.lo, self.hi)} "
                f"({self.level:.0%}, {self.n_evals} evals); crosses {self.limit * 100:.1f}%: {self.crossing.text(self.end)}")

    @property
    def over_limit(self) -> bool:
        """The interval's lower end passes the limit: the run is forecast not to hold it."""
        return self.lo > self.limit

    def to_json(self) -> dict:
        return {"step": self.step, "end": self.end, "value": self.value, "lo": self.lo, "hi": self.hi,
                "level": self.level, "limit": self.limit, "crossing": self.crossing.to_json(),
                "band": [p.to_json() for p in self.band], "n_evals": self.n_evals, "lines": self.lines}

    @classmethod
    def from_json(cls, payload: dict | None) -> "Forecast | None":
        if payload is None:
            return None
        return cls(payload["step"], payload["end"], payload["value"], payload["lo"], payload["hi"], payload["limit"],
                   Crossing.from_json(payload["crossing"]), [BandPoint.from_json(p) for p in payload.get("band", [])],
                   payload["n_evals"], payload.get("level", LEVEL), payload.get("lines", True))


def _basis(family: str, x: np.ndarray) -> np.ndarray:
    """g(x) of a family's trend y = a + beta * g(x); g(1) = 0, so a is the forecast at the end."""
    return np.log(x) if family == "log" else x - 1.0


@dataclass(frozen=True)
class CurveFit:
    """The fitted trends and their bootstrap curves: y(s) = a + beta * g(x(s)) for each family in
    FAMILIES, the replicates' a (their end moved by the curve term), beta and family."""

    a: float  # the point forecast at the end (log-ratio units): the mean of the families' fits
    a_fits: dict[str, float]
    beta_fits: dict[str, float]
    a_reps: np.ndarray
    beta_reps: np.ndarray
    family_reps: np.ndarray  # index into FAMILIES, per replicate
    sigma: float  # the curve term's sd (log-ratio units; the median over the curves)
    clock: Callable[[np.ndarray], np.ndarray]
    end: int

    def x(self, steps) -> np.ndarray:
        total = float(self.clock(np.asarray([self.end]))[0])
        return np.asarray(self.clock(np.asarray(steps, dtype=np.int64)), dtype=np.float64) / total

    def log_ratio_at(self, steps) -> tuple[np.ndarray, np.ndarray]:
        """(the point forecast's y at `steps`, the replicates' y: (resamples, len(steps)))."""
        x = self.x(steps)
        point = np.mean([self.a_fits[f] + self.beta_fits[f] * _basis(f, x) for f in self.a_fits], axis=0)
        reps = np.empty((len(self.a_reps), len(x)))
        for i, family in enumerate(FAMILIES):
            mine = self.family_reps == i
            reps[mine] = self.a_reps[mine, None] + self.beta_reps[mine, None] * _basis(family, x)[None, :]
        return point, reps

    def drift_at(self, steps, level: float = LEVEL) -> list[BandPoint]:
        """Drift forecast at `steps` (any step asked after step 0), with its `level` interval."""
        point, reps = self.log_ratio_at(steps)
        tail = (1 - level) / 2
        lo, hi = np.quantile(reps, [tail, 1 - tail], axis=0)
        return [BandPoint(int(s), math.expm1(float(p)), math.expm1(float(a)), math.expm1(float(z)))
                for s, p, a, z in zip(steps, point, lo, hi)]

    def crossing(self, limit: float, after: int, level: float = LEVEL) -> Crossing:
        """The first step after `after` at which each curve passes `limit` (drift), summarised by the
        median and the interval's ends over the curves; a curve that stays under counts as never."""
        steps = np.arange(after + 1, self.end + 1)
        if steps.size == 0:
            return Crossing(None, None, None)
        _, reps = self.log_ratio_at(steps)
        over = reps > math.log1p(limit)
        first = np.where(over.any(axis=1), steps[np.argmax(over, axis=1)].astype(np.float64), np.inf)
        tail = (1 - level) / 2
        lo, mid, hi = np.quantile(first, [tail, 0.5, 1 - tail], method="inverted_cdf")
        as_step = lambda q: None if not math.isfinite(q) else int(q)  # noqa: E731
        return Crossing(as_step(mid), as_step(lo), as_step(hi))


def _trend(y: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of y (replicates, m) on a + beta * u: (a, beta) per replicate."""
    centred = u - u.mean()
    beta = ((y - y.mean(axis=1, keepdims=True)) @ centred) / (centred ** 2).sum()
    return y.mean(axis=1) - beta * u.mean(), beta


def fit(trajectory: Trajectory, end: int, clock: Callable[[np.ndarray], np.ndarray] | None = None,
        lines: bool = True, resamples: int = RESAMPLES, seed: int = 0) -> CurveFit:
    """The trends through a run's last evals and their bootstrap curves (module docstring)."""
    if len(trajectory.steps) < MIN_EVALS:
        raise ForecastError(f"a forecast needs {MIN_EVALS} evals (step 0 and two more), got {len(trajectory.steps)}")
    if trajectory.steps[-1] > end:
        raise ForecastError(f"the last eval (step {trajectory.steps[-1]}) is past the end (step {end})")
    clock = clock or (lambda steps: np.asarray(steps, dtype=np.float64))
    total = float(clock(np.asarray([end]))[0])
    x = np.asarray(clock(trajectory.steps[1:]), dtype=np.float64) / total
    if not (total > 0 and np.all(x > 0) and np.all(np.diff(x) > 0)):
        raise ForecastError("the clock must be positive and increasing after step 0")
    window = slice(max(0, len(x) - WINDOW), len(x))
    y = trajectory.log_ratio()[window]
    m = len(y)
    bases = {family: _basis(family, x[window]) for family in FAMILIES}
    fits = {family: tuple(v[0] for v in _trend(y[None, :], u)) for family, u in bases.items()}
    # the residual of the family that fits best: the other's misfit is the shape's uncertainty, not noise
    rss = min(float(((y - (a + beta * bases[f])) ** 2).sum()) for f, (a, beta) in fits.items())
    residual_sd = math.sqrt(rss / (m - 2)) if m > 2 else 0.0
    rng = np.random.default_rng(seed)
    resolution = 0.0
    if lines:
        ys = trajectory.resampled_log_ratio(rng, resamples)
        resolution = float(np.std(ys[:, -1] - ys[:, -2], ddof=1))
    else:
        ys = np.repeat(trajectory.log_ratio()[None, :], resamples, axis=0)
    if m > 2:  # the residual sd has m - 2 degrees of freedom: each curve draws its own sigma (Student's t)
        sigmas = np.maximum(residual_sd * np.sqrt((m - 2) / rng.chisquare(m - 2, size=resamples)), resolution)
    else:  # two evals: no residual yet; the curve is not known better than it moved between them
        sigmas = np.full(resamples, max(resolution, abs(float(y[-1] - y[-2]))))
    sigma = float(np.median(sigmas))
    ys = ys[:, window] + rng.normal(0.0, 1.0, size=(resamples, m)) * sigmas[:, None]
    family_reps = np.arange(resamples) % len(FAMILIES)
    a_reps, beta_reps = np.empty(resamples), np.empty(resamples)
    for i, family in enumerate(FAMILIES):
        mine = family_reps == i
        a_reps[mine], beta_reps[mine] = _trend(ys[mine], bases[family])
    a_reps = a_reps + rng.normal(0.0, 1.0, size=resamples) * sigmas  # the last step: one more noisy eval
    a_point = float(np.mean([a for a, _ in fits.values()]))
    return CurveFit(a_point, {f: a for f, (a, _) in fits.items()}, {f: b for f, (_, b) in fits.items()},
                    a_reps, beta_reps, family_reps, sigma, clock, end)


def forecast(trajectory: Trajectory, end: int, limit: float, clock: Callable[[np.ndarray], np.ndarray] | None = None,
             lines: bool = True, resamples: int = RESAMPLES, seed: int = 0, level: float = LEVEL) -> Forecast:
    """Drift at `end` with its interval, the crossing of `limit`, and the band from the last eval to `end`."""
    curve = fit(trajectory, end, clock, lines, resamples, seed)
    now = int(trajectory.steps[-1])
    grid = sorted({int(round(s)) for s in np.linspace(now, end, BAND_POINTS)})
    band = curve.drift_at(grid, level)
    last = band[-1]
    return Forecast(now, end, last.value, last.lo, last.hi, limit, curve.crossing(limit, now, level), band,
                    len(trajectory.steps), level, lines)

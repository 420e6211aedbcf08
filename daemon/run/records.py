"""What a run measures and decides, as typed records: an eval (`EvalRecord`) with its changes
(`Change`) and its answers right (`AnswerSummary`), the best checkpoint (`Best`), an abort (`Abort`) and the verdict (`Verdict`).

The judge builds them (daemon/judge.py); the run's files hold their JSON: an eval in the events file
and in the resume state's history, the verdict in the verdict file and its event. Each record's
`to_json` is the one writer of its JSON and `from_json` the one reader, for every version tatu wrote
(tatu/records.py: a record without `format_version` is version 1, the same keys, unversioned).

Torch-free, like daemon/run/paths.py: the sweep and the report read these without the training code.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tatu.evals.forecast import Forecast
from tatu.records import FORMAT_KEY, RelativeChange, format_version

EVAL_FORMAT = 2  # 1: written before records had versions (same keys); `answers` and `forecast` were added to 2 (optional)
VERDICT_FORMAT = 2

Json = dict[str, Any]


@dataclass(frozen=True)
class Change(RelativeChange):
    """current/reference - 1 over the same lines (relative scale), with its paired bootstrap CI,
    p-value and minimum detectable effect (tatu.evals.scoring.compare_results)."""

    p_value: float | None
    mde: float | None

    def to_json(self) -> Json:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "p_value": self.p_value, "mde": self.mde}

    @classmethod
    def from_json(cls, payload: Json | None) -> "Change | None":
        if payload is None:
            return None
        return cls(payload["value"], payload["lo"], payload["hi"], payload.get("p_value"), payload.get("mde"))


@dataclass(frozen=True)
class SetSummary:
    """What an eval shows of one set (the per-line sums stay in the resume state)."""

    ppl: float
    lo: float
    hi: float
    se: float
    bpc: float | None
    bpb: float | None
    n_lines: int
    n_lines_total: int
    n_tokens: int

    def to_json(self) -> Json:
        return {"ppl": self.ppl, "lo": self.lo, "hi": self.hi, "se": self.se, "bpc": self.bpc, "bpb": self.bpb,
                "n_lines": self.n_lines, "n_lines_total": self.n_lines_total, "n_tokens": self.n_tokens}

    @classmethod
    def from_json(cls, payload: Json) -> "SetSummary":
        return cls(payload["ppl"], payload["lo"], payload["hi"], payload["se"], payload.get("bpc"), payload.get("bpb"),
                   payload["n_lines"], payload["n_lines_total"], payload["n_tokens"])


@dataclass(frozen=True)
class CategorySummary:
    """One word category of one set: its summary and its paired change vs step 0 (None without a baseline)."""

    summary: SetSummary
    change: Change | None

    def to_json(self) -> Json:
        return {**self.summary.to_json(), "change": None if self.change is None else self.change.to_json()}

    @classmethod
    def from_json(cls, payload: Json) -> "CategorySummary":
        return cls(SetSummary.from_json(payload), Change.from_json(payload.get("change")))


@dataclass(frozen=True)
class AnswerChange:
    """Answers right now against step 0, over the same items: the rate's difference, the items right
    only then and only now, and the exact McNemar p of those (tatu.evals.choice.mcnemar_exact)."""

    diff: float
    only_then: int
    only_now: int
    p_value: float

    def to_json(self) -> Json:
        return {"diff": self.diff, "only_then": self.only_then, "only_now": self.only_now, "p_value": self.p_value}

    @classmethod
    def from_json(cls, payload: Json | None) -> "AnswerChange | None":
        if payload is None:
            return None
        return cls(payload["diff"], payload["only_then"], payload["only_now"], payload["p_value"])


@dataclass(frozen=True)
class AnswerSummary:
    """One eval set's answers right at one eval (tatu.evals.answers: greedy, exact match once
    normalised): the rate with its Wilson 95% interval over the n items, the responses that had not
    ended within their budget (scored wrong), each item's verdict ("1" right, "0" wrong, in the
    file's order: what a sweep crosses over seeds x items), each response, and the change vs step 0
    (None without a step-0 baseline over the same items)."""

    rate: float
    lo: float
    hi: float
    n: int
    n_correct: int
    n_unfinished: int
    correct: str
    outputs: list[str]
    change: AnswerChange | None

    def to_json(self) -> Json:
        return {"rate": self.rate, "lo": self.lo, "hi": self.hi, "n": self.n, "n_correct": self.n_correct,
                "n_unfinished": self.n_unfinished, "change": None if self.change is None else self.change.to_json(),
                "correct": self.correct, "outputs": list(self.outputs)}

    def headline(self) -> Json:
        """What `tatu status` shows: everything but the per-item verdicts and the responses."""
        return {key: value for key, value in self.to_json().items() if key not in ("correct", "outputs")}

    @classmethod
    def from_json(cls, payload: Json) -> "AnswerSummary":
        return cls(payload["rate"], payload["lo"], payload["hi"], payload["n"], payload["n_correct"],
                   payload["n_unfinished"], payload["correct"], list(payload["outputs"]),
                   AnswerChange.from_json(payload.get("change")))


@dataclass(frozen=True)
class EvalRecord:
    """One eval: every number of the eval event, in its order."""

    step: int
    sets: dict[str, SetSummary]
    warnings: list[str]
    changes: dict[str, Change]  # per set scored at step 0 too, vs step 0
    drift: Change  # enRuler vs this run's step 0
    drift_tronco: Change | None  # enRuler vs the trunk (None: the trunk was scored on other lines)
    trunk_ok: bool | None
    best: bool
    best_set: str
    abort: str | None  # why MIX_FORGET_LIMIT aborts the run here
    notes: dict[str, str]  # per set, how it was scored (a subsampled ruler says so)
    seconds: float
    generations: Any  # the sample generations (daemon/samples.py), None when off or on another rank
    categories: dict[str, dict[str, CategorySummary]]  # {set: {word category: ...}}
    categories_note: str | None
    tasks: dict[str, Json]  # {task: TaskResult.summary() with each accuracy's McNemar change} (evals/choice.py)
    ci_covers: Json  # CiCovers.to_json() (daemon/ci_covers.py): what this eval's CIs cover
    line: str  # the EVAL contract line
    # per eval set whose pairs carry answers (none: {}, never a 0); computed on rank 0 alone, like generations
    answers: dict[str, AnswerSummary] = field(default_factory=dict)
    # drift at the run's last step with its interval, from the third eval of an SFT run on (None before)
    forecast: Forecast | None = None

    def to_json(self) -> Json:
        record = {
            "step": self.step,
            "sets": {name: s.to_json() for name, s in self.sets.items()},
            "warnings": list(self.warnings),
            "changes": {name: c.to_json() for name, c in self.changes.items()},
            "drift": self.drift.to_json(),
            "drift_tronco": None if self.drift_tronco is None else self.drift_tronco.to_json(),
            "trunk_ok": self.trunk_ok,
            "best": self.best,
            "best_set": self.best_set,
            "abort": self.abort,
            "notes": self.notes,
            "seconds": self.seconds,
            "generations": self.generations,
            "categories": {name: {category: c.to_json() for category, c in per.items()}
                           for name, per in self.categories.items()},
            "categories_note": self.categories_note,
            "tasks": self.tasks,
            "ci_covers": self.ci_covers,
            "line": self.line,
        }
        if self.answers:  # a run without answer sets writes the keys a version-1 record has
            record["answers"] = {name: a.to_json() for name, a in self.answers.items()}
        if self.forecast is not None:  # likewise: an eval without a forecast writes no key
            record["forecast"] = self.forecast.to_json()
        record[FORMAT_KEY] = EVAL_FORMAT
        return record

    @classmethod
    def from_json(cls, payload: Json, what: str = "eval record") -> "EvalRecord":
        format_version(payload, what, EVAL_FORMAT)  # versions 1 and 2 share their keys
        return cls(
            step=payload["step"],
            sets={name: SetSummary.from_json(s) for name, s in payload["sets"].items()},
            warnings=list(payload.get("warnings") or []),
            changes={name: Change.from_json(c) for name, c in (payload.get("changes") or {}).items()},
            drift=Change.from_json(payload["drift"]),
            drift_tronco=Change.from_json(payload.get("drift_tronco")),
            trunk_ok=payload.get("trunk_ok"),
            best=payload.get("best", False),
            best_set=payload.get("best_set", "sftHeld"),
            abort=payload.get("abort"),
            notes=payload.get("notes") or {},
            seconds=payload.get("seconds", 0.0),
            generations=payload.get("generations"),
            categories={name: {category: CategorySummary.from_json(c) for category, c in per.items()}
                        for name, per in (payload.get("categories") or {}).items()},
            categories_note=payload.get("categories_note"),
            tasks=payload.get("tasks") or {},
            ci_covers=payload.get("ci_covers") or {},
            line=payload.get("line", ""),
            answers={name: AnswerSummary.from_json(a) for name, a in (payload.get("answers") or {}).items()},
            forecast=Forecast.from_json(payload.get("forecast")),
        )


@dataclass(frozen=True)
class Best:
    """The eval whose weights are best/: its step, the set it was chosen by and that set's perplexity."""

    step: int
    set_name: str
    ppl: float

    def to_json(self) -> Json:
        return {"step": self.step, "set": self.set_name, "ppl": self.ppl}

    @classmethod
    def from_json(cls, payload: Json | None) -> "Best | None":
        return None if payload is None else cls(payload["step"], payload["set"], payload["ppl"])


@dataclass(frozen=True)
class Abort:
    """A run's abort: final, never trained past (its exit code is the run's on every restart)."""

    step: int
    reason: str
    code: int

    def to_json(self) -> Json:
        return {"step": self.step, "reason": self.reason, "code": self.code}

    @classmethod
    def from_json(cls, payload: Json | None) -> "Abort | None":
        return None if payload is None else cls(payload["step"], payload["reason"], payload["code"])


@dataclass(frozen=True)
class Criteria:
    """The verdict's criteria as the config fixed them before the run, in words."""

    improve: str
    forget_limit: str
    flat: str

    def to_json(self) -> Json:
        return {"improve": self.improve, "forget_limit": self.forget_limit, "flat": self.flat}

    @classmethod
    def from_json(cls, payload: Json) -> "Criteria":
        return cls(payload["improve"], payload["forget_limit"], payload["flat"])


@dataclass(frozen=True)
class VerdictNumbers:
    """The numbers a verdict was decided on: the last eval's, and the worst drift over the run."""

    step: int
    set_name: str  # the set the run learns on (sftHeld; ptVal for a trunk): its change is `SET_change`
    set_change: Change | None
    drift: Change
    drift_tronco: Change | None
    worst_drift: float
    worst_drift_step: int
    aborted: str | None

    def to_json(self) -> Json:
        return {"step": self.step, f"{self.set_name}_change": None if self.set_change is None else self.set_change.to_json(),
                "drift": self.drift.to_json(),
                "drift_tronco": None if self.drift_tronco is None else self.drift_tronco.to_json(),
                "worst_drift": self.worst_drift, "worst_drift_step": self.worst_drift_step, "aborted": self.aborted}

    @classmethod
    def from_json(cls, payload: Json) -> "VerdictNumbers":
        set_name = next(key.removesuffix("_change") for key in payload if key.endswith("_change"))
        return cls(payload["step"], set_name, Change.from_json(payload[f"{set_name}_change"]),
                   Change.from_json(payload["drift"]), Change.from_json(payload.get("drift_tronco")),
                   payload["worst_drift"], payload["worst_drift_step"], payload.get("aborted"))


@dataclass(frozen=True)
class Verdict:
    """The run's verdict (forgets, holds, flat, inconclusive) against its criteria. A run that never
    evaluated has a reason and no numbers."""

    outcome: str
    criteria: Criteria
    line: str | None = None  # the VERDICT line, with what its CIs cover
    numbers: VerdictNumbers | None = None
    ci_covers: Json | None = None  # CiCovers.to_json()
    reason: str | None = None  # why there are no numbers

    def to_json(self) -> Json:
        if self.numbers is None:
            return {"verdict": self.outcome, "reason": self.reason, "criteria": self.criteria.to_json(),
                    FORMAT_KEY: VERDICT_FORMAT}
        return {"verdict": self.outcome, "line": self.line, "numbers": self.numbers.to_json(),
                "criteria": self.criteria.to_json(), "ci_covers": self.ci_covers, FORMAT_KEY: VERDICT_FORMAT}

    @classmethod
    def from_json(cls, payload: Json, what: str = "verdict") -> "Verdict":
        format_version(payload, what, VERDICT_FORMAT)  # versions 1 and 2 share their keys
        numbers = payload.get("numbers")
        return cls(payload["verdict"], Criteria.from_json(payload["criteria"]), payload.get("line"),
                   None if numbers is None else VerdictNumbers.from_json(numbers), payload.get("ci_covers"),
                   payload.get("reason"))

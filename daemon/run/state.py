"""RunState: what a run has measured and decided (step, baseline, best, history, trunk reference,
abort, eval files, the per-category, per-task and per-answer baselines, where the LR schedule ends), with its
JSON round trip. The resume state around it: daemon/resume.py."""
from __future__ import annotations

from dataclasses import dataclass, field

from tatu.daemon.run.records import Abort, Best, EvalRecord
from tatu.evals.scoring import SetResult
from tatu.model.checkpoint import CheckpointError


def results_to_json(results: dict[str, SetResult] | None) -> dict | None:
    return None if results is None else {name: r.to_json() for name, r in results.items()}


def results_from_json(payload: dict | None, n_resamples: int, seed: int) -> dict[str, SetResult] | None:
    if payload is None:
        return None
    return {name: SetResult.from_json(r, n_resamples, seed) for name, r in payload.items()}


def is_results_json(payload) -> bool:
    """A trunk reference in the current shape (SetResult JSON per set); older seeds stored another."""
    return isinstance(payload, dict) and all(isinstance(r, dict) and "lines" in r for r in payload.values())


@dataclass
class RunState:
    step: int = 0
    baseline: dict[str, SetResult] | None = None  # the step-0 eval: never recomputed after a restart
    best: Best | None = None
    history: list[EvalRecord] = field(default_factory=list)  # every eval record, as logged
    trunk_reference: dict[str, SetResult] | None = None  # the trunk's scores, for drift_tronco
    aborted: Abort | None = None  # final, never trained past
    eval_files: dict[str, str] | None = None  # sha256 of each eval file the baseline was measured on
    category_baseline: dict[str, dict[str, SetResult]] | None = None  # the step-0 per-category results
    task_baseline: dict[str, dict] | None = None  # the step-0 per-item correctness of each task
    # the step-0 answers of each set with answers: its AnswerSummary.correct ("0110...", file order)
    answer_baseline: dict[str, str] | None = None
    # The step the LR schedule ends at (a cosine reaches TATU_MIN_LR there): the run's first
    # MIX_STEPS_LIMIT, kept by every restart. None: a state saved before it was stored (start.py).
    lr_schedule_end: int | None = None
    # TATU_ANCHOR / TATU_DISTILL as the run started them: the seed's and the Fisher file's sha256
    # (daemon/retention/setup.py); None when both are off.
    retention: dict | None = None
    # the ruler's per-line NLL sums of every eval after step 0, by step: what the drift forecast is
    # fitted to (daemon/forecast.py); {} in a state saved before it was kept
    ruler_lines: dict[int, list[float]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"step": self.step, "baseline": results_to_json(self.baseline), "best": None if self.best is None else self.best.to_json(),
                "history": [record.to_json() for record in self.history], "trunk_reference": results_to_json(self.trunk_reference),
                "aborted": None if self.aborted is None else self.aborted.to_json(), "eval_files": self.eval_files,
                "category_baseline": None if self.category_baseline is None else
                {name: results_to_json(per) for name, per in self.category_baseline.items()},
                "task_baseline": self.task_baseline, "answer_baseline": self.answer_baseline,
                "lr_schedule_end": self.lr_schedule_end,
                **({"seed_terms": self.retention} if self.retention is not None else {}),
                **({"ruler_lines": {str(step): nll for step, nll in self.ruler_lines.items()}} if self.ruler_lines else {})}

    @classmethod
    def from_json(cls, payload: dict, n_resamples: int, seed: int) -> "RunState":
        for key in ("baseline", "trunk_reference"):
            if payload.get(key) is not None and not is_results_json(payload[key]):
                # A state written before eval results had one shape: not worth converting, and a
                # crash would be restarted in a loop. Exit 65, said plainly.
                raise CheckpointError(f"resume state: its {key} is in an older format; start a new TATU_RUN")
        return cls(step=payload["step"], baseline=results_from_json(payload["baseline"], n_resamples, seed),
                   best=Best.from_json(payload["best"]),
                   history=[EvalRecord.from_json(record, "resume state: history") for record in payload["history"]],
                   trunk_reference=results_from_json(payload["trunk_reference"], n_resamples, seed),
                   aborted=Abort.from_json(payload["aborted"]), eval_files=payload["eval_files"],
                   category_baseline=None if payload.get("category_baseline") is None else
                   {name: results_from_json(per, n_resamples, seed) for name, per in payload["category_baseline"].items()},
                   task_baseline=payload.get("task_baseline"), answer_baseline=payload.get("answer_baseline"),
                   lr_schedule_end=payload.get("lr_schedule_end"),
                   retention=payload.get("seed_terms"),
                   ruler_lines={int(step): nll for step, nll in (payload.get("ruler_lines") or {}).items()})

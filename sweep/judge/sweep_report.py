"""A judged sweep as one document: SweepReport, what judge/analysis.py analyze() returns and
report.json holds (to_json/from_json are its one writer and one reader), every stage and the
verdict typed.

On disk it is report.json, whose keys and values are what tatu wrote before the records existed
(so every reader of an old report.json, and every diff between two, still works), plus FORMAT_KEY.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tatu.atomic import write_json_atomic
from tatu.records import FORMAT_KEY, format_version
from tatu.sweep.judge.answers import ConfigAnswers, PairedAnswers
from tatu.sweep.judge.power import SeedsForEffect
from tatu.sweep.judge.records import ConfigResult, SweepVerdict
from tatu.sweep.judge.vs_parent import VsParent
from tatu.sweep.plan.load import configs_json
from tatu.sweep.plan.lock import Tuned

REPORT_FILE = "report.json"
REPORT_VERSION = 2  # 1: report.json without FORMAT_KEY (the same keys otherwise)


@dataclass(frozen=True)
class TuneStage:
    """The tune stage's configurations, one per tune value, on the dev half of sftHeld."""

    var: str
    configs: tuple[ConfigResult, ...]

    def to_json(self) -> dict:
        return {"var": self.var, "configs": [c.to_json() for c in self.configs]}

    @classmethod
    def from_json(cls, payload: dict) -> TuneStage:
        return cls(payload["var"], tuple(ConfigResult.from_json(c) for c in payload["configs"]))


@dataclass(frozen=True)
class CompareStage:
    """The comparison stage: its configurations (the baseline marked, each paired with it), whether
    every member the verdict waits for has finished, and the interpolated ones against their parents."""

    configs: tuple[ConfigResult, ...]
    complete: bool
    vs_parent: tuple[VsParent, ...] = ()

    def to_json(self) -> dict:
        return {"configs": [c.to_json() for c in self.configs], "complete": self.complete,
                "vs_parent": [row.to_json() for row in self.vs_parent]}

    @classmethod
    def from_json(cls, payload: dict) -> CompareStage:
        return cls(tuple(ConfigResult.from_json(c) for c in payload["configs"]), payload["complete"],
                   tuple(VsParent.from_json(row) for row in payload.get("vs_parent") or ()))


@dataclass(frozen=True)
class SweepReport:
    """Every number of a sweep's report: the plan's words (name, question, the locked rule, the
    hashes, seeds, named configurations), the tune stage and its choice, the comparison stage, the
    locked rule's verdict and the seeds-for block. Each stage None until it has members."""

    name: str
    question: str
    rule: str
    plan_hash: str
    plan_portable_hash: str
    seeds: list[int]
    configs: dict[str, dict[str, str]] | None = None  # the named configurations, in the plan's order
    tune: TuneStage | None = None
    tuned: Tuned | None = None
    compare: CompareStage | None = None
    verdict: SweepVerdict | None = None
    seeds_for: SeedsForEffect | None = None
    # answers right over seeds x pairs, per configuration and set with answers (sweep/judge/answers.py)
    answers: tuple[ConfigAnswers, ...] = ()
    # each configuration vs the baseline on answers right, paired by seed and pair at the common step
    answers_paired: tuple[PairedAnswers, ...] = ()

    def to_json(self) -> dict:
        """What report.json holds (`answers` only where some set has answers: absent, never 0)."""
        out = self._core_json()
        if self.answers:
            out["answers"] = [a.to_json() for a in self.answers]
        if self.answers_paired:
            out["answers_paired"] = [a.to_json() for a in self.answers_paired]
        return out

    def _core_json(self) -> dict:
        return {FORMAT_KEY: REPORT_VERSION, "name": self.name, "question": self.question, "rule": self.rule,
                "plan_hash": self.plan_hash, "plan_portable_hash": self.plan_portable_hash, "seeds": self.seeds,
                "configs": configs_json(self.configs) if self.configs else None,
                "tune": self.tune and self.tune.to_json(), "tuned": self.tuned and self.tuned.to_json(),
                "compare": self.compare and self.compare.to_json(), "verdict": self.verdict and self.verdict.to_json(),
                "seeds_for": self.seeds_for and self.seeds_for.to_json()}

    @classmethod
    def from_json(cls, payload: dict, what: str = REPORT_FILE) -> SweepReport:
        """From report.json's object (every version; `what` names it in an error)."""
        format_version(payload, what, REPORT_VERSION)  # 1 and 2 hold the same keys
        return cls(payload["name"], payload["question"], payload["rule"], payload["plan_hash"],
                   payload.get("plan_portable_hash", payload["plan_hash"]), payload["seeds"],
                   {name: dict(sets) for name, sets in payload["configs"]} if payload.get("configs") else None,
                   TuneStage.from_json(payload["tune"]) if payload.get("tune") else None,
                   Tuned.from_json(payload["tuned"]) if payload.get("tuned") else None,
                   CompareStage.from_json(payload["compare"]) if payload.get("compare") else None,
                   SweepVerdict.from_json(payload["verdict"]) if payload.get("verdict") else None,
                   SeedsForEffect.from_json(payload["seeds_for"]) if payload.get("seeds_for") else None,
                   tuple(ConfigAnswers.from_json(a) for a in payload.get("answers") or ()),
                   tuple(PairedAnswers.from_json(a) for a in payload.get("answers_paired") or ()))


def write_report_json(out_dir: Path, report: SweepReport) -> Path:
    path = Path(out_dir) / REPORT_FILE
    # sorted keys: two reports of one plan diff line by line
    write_json_atomic(path, report.to_json(), sort_keys=True)
    return path


def read_report_json(path: Path) -> SweepReport:
    """report.json (a file or the directory holding it) as the report analyze returned."""
    path = Path(path)
    if path.is_dir():
        path = path / REPORT_FILE
    return SweepReport.from_json(json.loads(path.read_text()), str(path))

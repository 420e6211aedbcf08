"""Pre-registration: sweeps/<name>/plan.lock.json, written atomically before anything runs, and
read back as one typed LockedPlan. This module is the lock's only reader and writer: nothing past
it holds the lock's JSON.

The lock holds the plan as pre-registered (its rule parsed once, when the lock is read), every
member's effective configuration, the plan's hash and (once the tune stage has chosen) the tuned
value with what it was chosen on. Results are judged only by the locked rule. A later start under
the same name must bring the same plan; the one change allowed is more comparison seeds (new
members, nothing else moves).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

from tatu.daemon.run.paths import SweepDir
from tatu.atomic import write_json_atomic
from tatu.exitcodes import BAD_CONFIG
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.design import design_from_json
from tatu.sweep.plan.interpolate import InterpolateSpec
from tatu.sweep.plan.load import Plan, configs_json
from tatu.sweep.plan.member import Member
from tatu.sweep.plan.rule import parse_rule

VERSION = 1
# The tune stage selects on one half of the held-out pairs; the comparison judges on the other.
SPLIT = {"set": "sftHeld", "dev": "even line indices (0, 2, 4, ...)", "judge": "odd line indices (1, 3, 5, ...)"}


def lock_path(sweep_dir: Path) -> Path:
    return SweepDir(sweep_dir).lock_file


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class LockedMember:
    """A member as locked: its env file's variables and its full effective configuration."""

    member: Member
    config: dict       # RunConfig.to_json(): every run variable, defaults included
    config_hash: str

    @classmethod
    def of(cls, member: Member) -> LockedMember:
        from tatu.daemon.config import load_config

        config, _ = load_config(member.env)
        return cls(member, config.to_json(), config.hash)

    def to_json(self) -> dict:
        return {**self.member.to_json(), "config": self.config, "config_hash": self.config_hash}

    @classmethod
    def from_json(cls, doc: dict) -> LockedMember:
        return cls(Member.from_json(doc), doc["config"], doc["config_hash"])


@dataclass(frozen=True)
class TuneScore:
    """One tune value's mean dev-half sftHeld change over the tune seeds, with its CI, and whether
    every seed of it finished clean (tatu.sweep.judge.tune)."""

    dev_change: float
    lo: float
    hi: float
    clean: bool

    def to_json(self) -> dict:
        return {"dev_change": self.dev_change, "lo": self.lo, "hi": self.hi, "clean": self.clean}

    @classmethod
    def from_json(cls, doc: dict) -> TuneScore:
        return cls(doc["dev_change"], doc["lo"], doc["hi"], doc["clean"])


@dataclass(frozen=True)
class Tuned:
    """The tune stage's choice, locked before the comparison runs: the value and what it was chosen on."""

    var: str
    value: str
    selected_on: str
    reason: str
    scores: dict[str, TuneScore]  # by tune value

    def to_json(self) -> dict:
        return {"var": self.var, "value": self.value, "selected_on": self.selected_on, "reason": self.reason,
                "scores": {value: score.to_json() for value, score in self.scores.items()}}

    @classmethod
    def from_json(cls, doc: dict) -> Tuned:
        return cls(doc["var"], doc["value"], doc["selected_on"], doc["reason"],
                   {value: TuneScore.from_json(score) for value, score in doc["scores"].items()})


@dataclass(frozen=True)
class SeedsAdded:
    """A later start that added comparison seeds (the one change a locked plan allows)."""

    seeds: tuple[int, ...]
    at: str

    def to_json(self) -> dict:
        return {"added_seeds": list(self.seeds), "at": self.at}

    @classmethod
    def from_json(cls, doc: dict) -> SeedsAdded:
        return cls(tuple(doc["added_seeds"]), doc["at"])


@dataclass(frozen=True)
class LockedPlan:
    """What plan.lock.json holds: the plan as pre-registered (`plan`: its rule parsed, its design,
    [interpolate] and [tune]), its hashes, every member with its effective configuration, the tuned
    value once chosen, and the seeds added since."""

    plan: Plan
    plan_hash: str
    plan_portable_hash: str | None   # None: locked before the portable hash existed (reports show plan_hash)
    created: str
    members: tuple[LockedMember, ...]
    tuned: Tuned | None = None
    history: tuple[SeedsAdded, ...] = ()
    tune_split: dict | None = None   # SPLIT as locked; None without a tune stage

    def members_of(self, stage: str | None = None) -> list[Member]:
        """The locked members (of one stage: "tune" or "compare"), in the lock's order."""
        return [m.member for m in self.members if stage is None or m.member.stage == stage]

    def effective_config(self, run: str) -> dict:
        """A member's effective configuration as locked (what a criterion's VALUE resolves against)."""
        return next(m.config for m in self.members if m.member.run == run)

    @property
    def tuning(self) -> bool:
        """The tune stage is still to choose: only its members run."""
        return bool(self.plan.tune_var) and self.tuned is None

    def tuned_values(self) -> dict[str, str] | None:
        """{the tuned variable: its chosen value}, once chosen."""
        return {self.tuned.var: self.tuned.value} if self.tuned else None

    def to_json(self) -> dict:
        plan = self.plan
        out = {}
        # each absent without its section, as in Plan.core()
        if plan.configs:
            out["configs"] = configs_json(plan.configs)
        if plan.mde is not None:
            out["mde"] = plan.mde
        if plan.interpolate:
            out["interpolate"] = plan.interpolate.to_json()
        if plan.design:
            out["design"] = plan.design.to_json()
        if self.plan_portable_hash is not None:
            out["plan_portable_hash"] = self.plan_portable_hash
        tune = ({"var": plan.tune_var, "values": plan.tune_values, "seeds": plan.tune_seeds, "split": self.tune_split}
                if plan.tune_var else None)
        return {**out, "version": VERSION, "name": plan.name, "plan_hash": self.plan_hash,
                "plan_file": str(plan.path), "question": plan.question, "rule": plan.rule.text, "axes": plan.axes,
                "baseline": plan.baseline, "base_env": plan.base_env, "seeds": plan.seeds, "tune": tune,
                "tuned": self.tuned and self.tuned.to_json(), "created": self.created,
                "history": [h.to_json() for h in self.history], "members": [m.to_json() for m in self.members]}

    @classmethod
    def from_json(cls, doc: dict) -> LockedPlan:
        source = Path(doc["plan_file"])
        configs = {name: dict(sets) for name, sets in doc.get("configs") or []}
        tune = doc.get("tune")
        plan = Plan(source, doc["name"], doc["question"], list(doc["seeds"]), dict(doc["base_env"]),
                    {k: list(v) for k, v in doc["axes"].items()}, dict(doc["baseline"]),
                    parse_rule(doc["rule"], doc["axes"], source, list(configs)),
                    tune_var=tune["var"] if tune else None, tune_values=list(tune["values"]) if tune else [],
                    tune_seeds=list(tune["seeds"]) if tune else [], configs=configs, mde=doc.get("mde"),
                    interpolate=InterpolateSpec.from_json(doc.get("interpolate")),
                    design=design_from_json(doc.get("design")))
        return cls(plan, doc["plan_hash"], doc.get("plan_portable_hash"), doc["created"],
                   tuple(LockedMember.from_json(m) for m in doc["members"]),
                   Tuned.from_json(doc["tuned"]) if doc.get("tuned") else None,
                   tuple(SeedsAdded.from_json(h) for h in doc["history"]), tune["split"] if tune else None)


def read_lock(sweep_dir: Path) -> LockedPlan:
    path = lock_path(sweep_dir)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepError(BAD_CONFIG, f"{path}: no such sweep (tatu sweep start PLAN writes it)")
    except (OSError, json.JSONDecodeError) as exc:
        raise SweepError(BAD_CONFIG, f"{path}: unreadable lock ({exc})")
    if doc.get("version") != VERSION:
        raise SweepError(BAD_CONFIG, f"{path}: lock version {doc.get('version')!r}, this tatu reads {VERSION}")
    try:
        return LockedPlan.from_json(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise SweepError(BAD_CONFIG, f"{path}: unreadable lock ({type(exc).__name__}: {exc})")


def _write(sweep_dir: Path, locked: LockedPlan) -> LockedPlan:
    write_json_atomic(lock_path(sweep_dir), locked.to_json(), sort_keys=True)
    return locked


def new_lock(plan: Plan, sweep_dir: Path) -> LockedPlan:
    out = SweepDir(Path(sweep_dir).absolute()).runs
    listed = plan.tune_members(out) + plan.compare_members(out, None)
    return LockedPlan(replace(plan, path=plan.path.absolute()), plan.hash, plan.portable_hash, _now(),
                      tuple(LockedMember.of(m) for m in listed), tune_split=SPLIT if plan.tune_var else None)


def reconcile(plan: Plan, sweep_dir: Path) -> tuple[LockedPlan, str]:
    """(the locked plan to run by, what happened: 'locked' | 'unchanged' | 'added seeds [...]').

    Raises SweepError(78) when the plan differs from the locked one in anything but added seeds."""
    path = lock_path(sweep_dir)
    if not path.exists():
        locked = new_lock(plan, sweep_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        return _write(sweep_dir, locked), "locked"
    locked = read_lock(sweep_dir)
    if locked.plan_hash != plan.hash:
        core = locked.plan.core()
        changed = [k for k, v in plan.core().items() if core.get(k) != v]
        raise SweepError(BAD_CONFIG, f"{plan.path}: sweep {plan.name!r} is locked ({path}) with another plan "
                                   f"(changed: {', '.join(changed) or 'hash'}); only adding seeds is allowed. "
                                   f"Use a new name for a new plan (or --replace, where no member trained a step)")
    removed = [s for s in locked.plan.seeds if s not in plan.seeds]
    if removed:
        raise SweepError(BAD_CONFIG, f"{plan.path}: seeds {removed} are locked in {path} and cannot be removed")
    added = [s for s in plan.seeds if s not in locked.plan.seeds]
    if not added:
        return locked, "unchanged"
    return _write(sweep_dir, add_seeds(locked, added, sweep_dir)), f"added seeds {added}"


def add_seeds(locked: LockedPlan, added: list[int], sweep_dir: Path) -> LockedPlan:
    out = SweepDir(Path(sweep_dir).absolute()).runs
    new = locked.plan.compare_members(out, locked.tuned_values(), seeds=added)
    return replace(locked, plan=replace(locked.plan, seeds=locked.plan.seeds + added),
                   members=locked.members + tuple(LockedMember.of(m) for m in new),
                   history=locked.history + (SeedsAdded(tuple(added), _now()),))


def record_tuned(sweep_dir: Path, locked: LockedPlan, tuned: Tuned) -> LockedPlan:
    """Write the tune stage's choice and the comparison members it defines into the lock."""
    out = SweepDir(Path(sweep_dir).absolute()).runs
    new = locked.plan.compare_members(out, {tuned.var: tuned.value}, seeds=locked.plan.seeds)
    tune = tuple(m for m in locked.members if m.member.stage == "tune")
    return _write(sweep_dir, replace(locked, tuned=tuned, members=tune + tuple(LockedMember.of(m) for m in new)))

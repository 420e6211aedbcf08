"""Pre-registration: sweeps/<name>/plan.lock.json, written atomically before anything runs.

The lock holds every member's effective configuration, the decision rule, the baseline, the
plan's hash and (once the tune stage has chosen) the tuned value with what it was chosen on.
Results are judged only by the locked rule. A later start under the same name must bring the
same plan; the one change allowed is more comparison seeds (new members, nothing else moves).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from tatu.atomic import write_json_atomic
from tatu.exitcodes import BAD_CONFIG
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.interpolate import InterpolateSpec
from tatu.sweep.plan.design import design_from_json
from tatu.sweep.plan.load import Plan
from tatu.sweep.plan.member import Member
from tatu.sweep.plan.rule import parse_rule

LOCK_NAME = "plan.lock.json"
VERSION = 1
# The tune stage selects on one half of the held-out pairs; the comparison judges on the other.
SPLIT = {"set": "sftHeld", "dev": "even line indices (0, 2, 4, ...)", "judge": "odd line indices (1, 3, 5, ...)"}


def lock_path(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / LOCK_NAME


def read_lock(sweep_dir: Path) -> dict:
    path = lock_path(sweep_dir)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepError(BAD_CONFIG, f"{path}: no such sweep (tatu sweep start PLAN writes it)")
    except (OSError, json.JSONDecodeError) as exc:
        raise SweepError(BAD_CONFIG, f"{path}: unreadable lock ({exc})")
    if doc.get("version") != VERSION:
        raise SweepError(BAD_CONFIG, f"{path}: lock version {doc.get('version')!r}, this tatu reads {VERSION}")
    return doc


def members(lock: dict, stage: str | None = None) -> list[Member]:
    found = [Member.from_json(m) for m in lock["members"]]
    return [m for m in found if stage is None or m.stage == stage]


def _entry(member: Member) -> dict:
    """The member as locked: its env file's variables and its full effective configuration."""
    from tatu.daemon.config import load_config

    config, _ = load_config(member.env)
    return {**member.to_json(), "config": config.to_json(), "config_hash": config.hash}


def new_lock(plan: Plan, sweep_dir: Path) -> dict:
    out = Path(sweep_dir).absolute() / "runs"
    listed = plan.tune_members(out) + plan.compare_members(out, None)
    configs = {"configs": plan.core()["configs"]} if plan.configs else {}  # absent without [configs], as in core()
    mde = {"mde": plan.mde} if plan.mde is not None else {}  # likewise
    interpolate = {"interpolate": plan.interpolate.to_json()} if plan.interpolate else {}  # likewise
    design = {"design": plan.design.to_json()} if plan.design else {}  # likewise
    return {**configs, **mde, **interpolate, **design,
        "version": VERSION, "name": plan.name, "plan_hash": plan.hash, "plan_portable_hash": plan.portable_hash,
        "plan_file": str(plan.path.absolute()),
        "question": plan.question, "rule": plan.rule.text, "axes": plan.axes, "baseline": plan.baseline,
        "base_env": plan.base_env, "seeds": plan.seeds,
        "tune": ({"var": plan.tune_var, "values": plan.tune_values, "seeds": plan.tune_seeds, "split": SPLIT}
                 if plan.tune_var else None),
        "tuned": None, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "history": [],
        "members": [_entry(m) for m in listed],
    }


def reconcile(plan: Plan, sweep_dir: Path) -> tuple[dict, str]:
    """(the lock to run by, what happened: 'locked' | 'unchanged' | 'added seeds [...]').

    Raises SweepError(78) when the plan differs from the locked one in anything but added seeds."""
    path = lock_path(sweep_dir)
    if not path.exists():
        lock = new_lock(plan, sweep_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, lock, sort_keys=True)
        return lock, "locked"
    lock = read_lock(sweep_dir)
    if lock["plan_hash"] != plan.hash:
        changed = [k for k, v in plan.core().items() if _locked_core(lock).get(k) != v]
        raise SweepError(BAD_CONFIG, f"{plan.path}: sweep {plan.name!r} is locked ({path}) with another plan "
                                   f"(changed: {', '.join(changed) or 'hash'}); only adding seeds is allowed. "
                                   f"Use a new name for a new plan")
    removed = [s for s in lock["seeds"] if s not in plan.seeds]
    if removed:
        raise SweepError(BAD_CONFIG, f"{plan.path}: seeds {removed} are locked in {path} and cannot be removed")
    added = [s for s in plan.seeds if s not in lock["seeds"]]
    if not added:
        return lock, "unchanged"
    lock = add_seeds(lock, plan, added, sweep_dir)
    write_json_atomic(path, lock, sort_keys=True)
    return lock, f"added seeds {added}"


def _locked_core(lock: dict) -> dict:
    tune = lock.get("tune")
    return {"name": lock["name"], "question": lock["question"], "base_env": lock["base_env"], "axes": lock["axes"],
            "baseline": lock["baseline"], "rule": lock["rule"],
            "tune": {k: tune[k] for k in ("var", "values", "seeds")} if tune else None,
            **({"configs": lock["configs"]} if lock.get("configs") else {}),
            **({"mde": lock["mde"]} if lock.get("mde") is not None else {}),
            **({"interpolate": lock["interpolate"]} if lock.get("interpolate") else {}),
            **({"design": lock["design"]} if lock.get("design") else {})}


def locked_configs(lock: dict) -> dict[str, dict[str, str]]:
    """The lock's named configurations, name -> the variables it sets, in the plan's order."""
    return {name: dict(sets) for name, sets in lock.get("configs") or []}


def add_seeds(lock: dict, plan: Plan, added: list[int], sweep_dir: Path) -> dict:
    out = Path(sweep_dir).absolute() / "runs"
    new = plan.compare_members(out, _tuned_values(lock), seeds=added)
    return {**lock, "seeds": lock["seeds"] + added, "members": lock["members"] + [_entry(m) for m in new],
            "history": lock["history"] + [{"added_seeds": added, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}


def _tuned_values(lock: dict) -> dict | None:
    tuned = lock.get("tuned")
    return {lock["tune"]["var"]: tuned["value"]} if tuned else None


def record_tuned(sweep_dir: Path, lock: dict, plan: Plan, value: str, selection: dict) -> dict:
    """Write the tune stage's choice and the comparison members it defines into the lock."""
    out = Path(sweep_dir).absolute() / "runs"
    tuned = {"var": lock["tune"]["var"], "value": value, **selection}
    lock = {**lock, "tuned": tuned}
    new = plan.compare_members(out, {tuned["var"]: value}, seeds=lock["seeds"])
    lock["members"] = [m for m in lock["members"] if m["stage"] == "tune"] + [_entry(m) for m in new]
    write_json_atomic(lock_path(sweep_dir), lock, sort_keys=True)
    return lock


def plan_from_lock(lock: dict) -> Plan:
    """The locked plan itself (the coordinator never reads the plan file again)."""
    source = Path(lock["plan_file"])
    configs = locked_configs(lock)
    plan = Plan(source, lock["name"], lock["question"], list(lock["seeds"]), dict(lock["base_env"]),
                {k: list(v) for k, v in lock["axes"].items()}, dict(lock["baseline"]),
                parse_rule(lock["rule"], lock["axes"], source, list(configs)), configs=configs, mde=lock.get("mde"),
                interpolate=InterpolateSpec.from_json(lock.get("interpolate")), design=design_from_json(lock.get("design")))
    if lock.get("tune"):
        plan.tune_var, plan.tune_values, plan.tune_seeds = lock["tune"]["var"], list(lock["tune"]["values"]), list(lock["tune"]["seeds"])
    return plan

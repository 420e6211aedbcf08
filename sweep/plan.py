"""A sweep's plan file (TOML) -> its member runs, their effective configs, a hash, a cost estimate.

    name = "replay-dose"
    question = "How much English replay keeps enRuler drift under the limit while sftHeld improves?"
    seeds = [1, 2, 3]                       # TATU_SEED of every configuration
    [base]
    env_file = "run5.env"                   # optional; KEY=VALUE lines
    vars = { TATU_DATA = "../demo/data", SFT_GE = 8, MIX_STEPS_LIMIT = 24 }
    [axes]
    REPLAY_N = [0, 2, 6]                    # any run variable; several axes -> their product
    [decision]
    baseline = { REPLAY_N = 0 }             # compared with (default: each axis's first value)
    rule = "smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT and sftHeld_change_hi < 0"
                                            # optional tail: "at the end" (default) | "at the common step"
    [tune]                                  # optional: tune one variable for the baseline first
    TATU_LR = [1e-3, 3e-3]
    seeds = [1, 2]                          # default: the plan's seeds

Relative paths (env_file, TATU_DATA, TATU_SEED_CKPT, TATU_TRUNK_CKPT) are relative to the
plan file's directory, so a plan means the same wherever `tatu sweep` runs; the lock holds
them absolute. TATU_RUN and TATU_OUT belong to the sweep: members are named from their axis
values (`replay-n6-s3`), run as `<sweep>.<member>`, in sweeps/<name>/runs/.
Every problem is a TatuExit(78) naming the file and the key; the TOML's shape is the pydantic
model PlanFile, as the run config's is RunConfig.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tatu.sweep.plan_file import PlanFile, read_plan_file, seed_list
from tatu.sweep.rule import Rule, parse_rule, plan_error  # noqa: F401  (parse_rule: the lock and the analysis read rules)

PATH_VARIABLES = ("TATU_DATA", "TATU_SEED_CKPT", "TATU_TRUNK_CKPT")
SWEEP_OWNED = ("TATU_RUN", "TATU_OUT")


@dataclass(frozen=True)
class Member:
    """One run of the sweep: a configuration at one seed."""

    name: str         # replay-n6-s3
    run: str          # <sweep>.<name>: TATU_RUN, the unit instance, the run dir
    stage: str        # "tune" or "compare"
    config_key: str   # replay-n6: the configuration without its seed
    values: dict      # axis variable -> value (strings, as the environment holds them)
    seed: int
    env: dict         # every variable the member's env file holds

    @property
    def run_dir(self) -> Path:
        """Where its daemon writes (TATU_OUT/TATU_RUN): what the member achieved is read from here."""
        return Path(self.env["TATU_OUT"]) / self.run

    def to_json(self) -> dict:
        return {"name": self.name, "run": self.run, "stage": self.stage, "config_key": self.config_key,
                "values": self.values, "seed": self.seed, "env": self.env}

    @classmethod
    def from_json(cls, doc: dict) -> "Member":
        return cls(doc["name"], doc["run"], doc["stage"], doc["config_key"], dict(doc["values"]), int(doc["seed"]),
                   dict(doc["env"]))


@dataclass
class Plan:
    path: Path
    name: str
    question: str
    seeds: list[int]
    base_env: dict[str, str]
    axes: dict[str, list[str]]
    baseline: dict[str, str]
    rule: Rule
    tune_var: str | None = None
    tune_values: list[str] = field(default_factory=list)
    tune_seeds: list[int] = field(default_factory=list)

    def core(self) -> dict:
        """Everything pre-registered except the comparison seeds (which may only grow)."""
        return {"name": self.name, "question": self.question, "base_env": self.base_env, "axes": self.axes,
                "baseline": self.baseline, "rule": self.rule.text,
                "tune": {"var": self.tune_var, "values": self.tune_values, "seeds": self.tune_seeds} if self.tune_var else None}

    @property
    def hash(self) -> str:
        """The lock's identity: core() with this checkout's absolute paths (what the members read)."""
        return _digest(self.core())

    def portable_core(self) -> dict:
        """core() with its paths relative to the plan file's directory, as the plan file says them."""
        here = self.path.resolve().parent

        def relative(env: dict) -> dict:
            return {k: os.path.relpath(v, here) if k in PATH_VARIABLES and v else v for k, v in env.items()}

        core = self.core()
        axes = {var: [os.path.relpath(v, here) for v in values] if var in PATH_VARIABLES else values
                for var, values in core["axes"].items()}
        return {**core, "base_env": relative(core["base_env"]), "axes": axes, "baseline": relative(core["baseline"])}

    @property
    def portable_hash(self) -> str:
        """The plan's identity on any checkout: the same plan file beside the same layout of inputs
        hashes the same wherever it lies (the inputs' contents are the run dirs' to record)."""
        return _digest(self.portable_core())

    def configurations(self) -> list[dict[str, str]]:
        names = list(self.axes)
        return [dict(zip(names, combo)) for combo in itertools.product(*(self.axes[n] for n in names))]

    def tune_members(self, sweep_out: Path) -> list[Member]:
        if not self.tune_var:
            return []
        out = []
        for value in self.tune_values:
            values = {**self.baseline, self.tune_var: value}
            key = "tune-" + config_label({self.tune_var: value})
            out += [self._member(key, values, seed, "tune", sweep_out) for seed in self.tune_seeds]
        return out

    def compare_members(self, sweep_out: Path, tuned: dict[str, str] | None, seeds: list[int] | None = None) -> list[Member]:
        """The comparison stage; with a tune stage, only once its value is chosen (`tuned`)."""
        if self.tune_var and not tuned:
            return []
        members = []
        for values in self.configurations():
            key = config_label(values)
            for seed in seeds or self.seeds:
                members.append(self._member(key, {**(tuned or {}), **values}, seed, "compare", sweep_out))
        return members

    def _member(self, key: str, values: dict[str, str], seed: int, stage: str, sweep_out: Path) -> Member:
        from tatu.daemon.config import ConfigError, load_config

        name = f"{key}-s{seed}"
        run = f"{self.name}.{name}"
        # TATU_EVAL_LINES: every eval's per-line scores, so members can be compared at a common step.
        env = {**self.base_env, **values, "TATU_SEED": str(seed), "TATU_RUN": run, "TATU_OUT": str(sweep_out),
               "TATU_EVAL_LINES": "1"}
        try:
            load_config(env)
        except ConfigError as exc:
            raise plan_error(self.path, f"member {name}", str(exc))
        shown = {k: v for k, v in values.items() if k in self.axes or k == self.tune_var}
        return Member(name, run, stage, key, shown, seed, env)


def _digest(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def config_label(values: dict[str, str]) -> str:
    """REPLAY_N=6 -> replay-n6; TATU_LR=0.001 -> lr0.001; several joined with '-'."""
    parts = []
    for var, value in values.items():
        label = var.lower().removeprefix("tatu_").replace("_", "-")
        parts.append(re.sub(r"[^A-Za-z0-9.-]", "-", f"{label}{value}"))
    return "-".join(parts)


def _env_value(value, path: Path, where: str) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise plan_error(path, where, f"{value} is not a finite number")
        return repr(value)
    raise plan_error(path, where, f"expected a number or a string, got {type(value).__name__}")


def _resolve_paths(env: dict[str, str], base_dir: Path) -> dict[str, str]:
    out = dict(env)
    for var in PATH_VARIABLES:
        if out.get(var):
            p = Path(out[var])
            out[var] = str((p if p.is_absolute() else base_dir / p).resolve())
    return out


def _base_env(doc: PlanFile, path: Path, known: set[str]) -> dict[str, str]:
    from tatu.envfile import parse_env_file

    env: dict[str, str] = {}
    if doc.base.env_file is not None:
        env_file = Path(doc.base.env_file)
        env.update(parse_env_file(env_file if env_file.is_absolute() else path.parent / env_file))
    for key, value in doc.base.vars.items():
        env[key] = _env_value(value, path, f"[base] vars.{key}")
    for key in env:
        if key in SWEEP_OWNED:
            raise plan_error(path, f"[base] {key}", "is set by the sweep (members run as <sweep>.<member> in sweeps/<name>/runs)")
        if key not in known:
            raise plan_error(path, f"[base] {key}", "is not a run variable")
    env.pop("TATU_SEED", None)  # the seeds list says which
    return _resolve_paths(env, path.parent)


def _axes(doc: PlanFile, path: Path, known: set[str]) -> dict[str, list[str]]:
    if not doc.axes:
        raise plan_error(path, "[axes]", "at least one axis, e.g. REPLAY_N = [0, 2, 6]")
    axes: dict[str, list[str]] = {}
    for var, values in doc.axes.items():
        if var not in known or var in SWEEP_OWNED or var == "TATU_SEED":
            raise plan_error(path, f"[axes] {var}", "is not a run variable a sweep may vary (seeds go in `seeds`)")
        if not values:
            raise plan_error(path, f"[axes] {var}", "expected a non-empty list of values")
        shown = [_env_value(v, path, f"[axes] {var}") for v in values]
        if len(set(shown)) != len(shown):
            raise plan_error(path, f"[axes] {var}", f"repeated values in {values}")
        axes[var] = [_resolve_paths({var: s}, path.parent)[var] for s in shown] if var in PATH_VARIABLES else shown
    return axes


def _baseline(doc: PlanFile, path: Path, axes: dict[str, list[str]]) -> dict[str, str]:
    baseline = {var: values[0] for var, values in axes.items()}
    for var, value in doc.decision.baseline.items():
        shown = _env_value(value, path, f"[decision] baseline.{var}")
        if var not in axes or shown not in axes[var]:
            raise plan_error(path, f"[decision] baseline.{var}", f"{shown} is not a value of an axis")
        baseline[var] = shown
    return baseline


def _add_tune(plan: Plan, tune: dict, path: Path, known: set[str]) -> None:
    tune = dict(tune)
    try:
        tune_seeds = seed_list(tune.pop("seeds", plan.seeds))
    except ValueError as exc:
        raise plan_error(path, "[tune] seeds", str(exc)) from None
    if len(tune) != 1:
        raise plan_error(path, "[tune]", "exactly one variable to tune, e.g. TATU_LR = [1e-3, 3e-3]")
    (var, values), = tune.items()
    if var not in known or var in SWEEP_OWNED or var == "TATU_SEED" or var in plan.axes:
        raise plan_error(path, f"[tune] {var}", "must be a run variable that is not an axis")
    if not isinstance(values, list) or len(values) < 2:
        raise plan_error(path, f"[tune] {var}", "expected at least two values to choose from")
    plan.tune_var, plan.tune_values, plan.tune_seeds = var, [_env_value(v, path, f"[tune] {var}") for v in values], tune_seeds


def load_plan(path: str | Path) -> Plan:
    """The plan file as members, checked whole: every problem is one line and exit 78."""
    from tatu.daemon.config import known_variables

    path = Path(path)
    doc = read_plan_file(path)
    known = set(known_variables())
    env = _base_env(doc, path, known)
    axes = _axes(doc, path, known)
    baseline = _baseline(doc, path, axes)
    if doc.decision.rule is None:
        raise plan_error(path, "[decision] rule", "missing: write the decision rule before the results")
    rule = parse_rule(doc.decision.rule, axes, path)
    plan = Plan(path, doc.name, doc.question, doc.seeds, env, axes, baseline, rule)
    if doc.tune is not None:
        _add_tune(plan, doc.tune, path, known)
    # Every member's config is checked now: a bad one is refused before anything runs.
    out = Path("/nonexistent-sweep-out")
    plan.tune_members(out)
    plan.compare_members(out, {plan.tune_var: plan.tune_values[0]} if plan.tune_var else None)
    return plan

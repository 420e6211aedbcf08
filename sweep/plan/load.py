"""A sweep's plan file (TOML) -> its member runs, their effective configs, a hash, a cost estimate.

    name = "replay-dose"
    question = "How much English replay keeps enRuler drift under the limit while sftHeld improves?"
    seeds = [1, 2, 3]                       # TATU_SEED of every configuration
    [base]
    env_file = "run5.env"                   # optional; KEY=VALUE lines
    vars = { TATU_DATA = "../demo/data", SFT_GE = 8, MIX_STEPS_LIMIT = 24 }
    [axes]
    REPLAY_N = [0, 2, 6]                    # any run variable; several axes -> their product
    [configs]                               # optional: named configurations, each setting several
    lora-r8 = { TATU_TRAIN = "lora", TATU_LORA_RANK = 8 }   # variables (tatu.sweep.plan.configs); with
    full = {}                               # axes too, each runs at every combination of them
    [decision]
    baseline = { REPLAY_N = 0 }             # compared with (default: each axis's first value;
                                            # a configuration: config = "full", default the first)
    rule = "smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT and sftHeld_change_hi < 0"
                                            # optional tail: "at the end" (default) | "at the common step"
    mde = "2%"                              # optional: the effect the report's seeds-for-MDE lines resolve
    [tune]                                  # optional: tune one variable for the baseline first
    TATU_LR = [1e-3, 3e-3]
    seeds = [1, 2]                          # default: the plan's seeds

Relative paths (env_file, TATU_DATA, TATU_SEED_CKPT, TATU_TRUNK_CKPT) are relative to the
plan file's directory, so a plan means the same wherever `tatu sweep` runs; the lock holds
them absolute. TATU_RUN and TATU_OUT belong to the sweep: members are named from their axis
values (`replay-n6-s3`, `lora-r8-s3`), run as `<sweep>.<member>`, in sweeps/<name>/runs/.
Every problem is a SweepError(78) naming the file and the key; the TOML's shape is the pydantic
model PlanFile, as the run config's is RunConfig.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from tatu.evals.seeds.sequential import Design
from tatu.sweep.plan.configs import check_distinct, config_variables, read_configs
from tatu.sweep.plan.data_check import check_members_data
from tatu.sweep.plan.interpolate import InterpolateSpec, read_interpolate
from tatu.sweep.plan.file import PlanFile, read_plan_file, seed_list
from tatu.sweep.plan.member import Member
from tatu.sweep.plan.rule import CONFIG, Rule, parse_rule, plan_error
from tatu.sweep.plan.design import read_design
from tatu.sweep.plan.values import PATH_VARIABLES, SWEEP_OWNED, config_label, env_value as _env_value, resolve_paths as _resolve_paths
from tatu.names import nearest


def _not_a_run_variable(name: str, known: set[str], what: str) -> str:
    """`what`, and the run variable the name is a typo of (REPLY_N -> REPLAY_N), where one is near."""
    meant = nearest(name, sorted(known - set(SWEEP_OWNED) - {"TATU_SEED"}))
    return what + (f" (did you mean {meant}?)" if meant else "")


@dataclass(frozen=True)
class Plan:
    """A plan as pre-registered: read from its file (load_plan) or from its lock (tatu.sweep.plan.lock)."""

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
    configs: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> the variables it sets, in order
    mde: float | None = None  # [decision] mde, a relative change; None: the report's default (sweep/judge/power.py)
    interpolate: InterpolateSpec | None = None  # [interpolate]: interpolated members (tatu.sweep.plan.interpolated)
    design: Design | None = None  # [design]: a group-sequential design over seeds (tatu.sweep.plan.design)

    def core(self) -> dict:
        """Everything pre-registered except the comparison seeds (which may only grow)."""
        core = {"name": self.name, "question": self.question, "base_env": self.base_env, "axes": self.axes,
                "baseline": self.baseline, "rule": self.rule.text,
                "tune": {"var": self.tune_var, "values": self.tune_values, "seeds": self.tune_seeds} if self.tune_var else None}
        if self.configs:  # absent without [configs], so a plan without them hashes as it always did
            core["configs"] = configs_json(self.configs)
        if self.mde is not None:  # likewise absent without [decision] mde
            core["mde"] = self.mde
        if self.interpolate is not None:  # likewise absent without [interpolate]
            core["interpolate"] = self.interpolate.to_json()
        if self.design is not None:  # likewise absent without [design]
            core["design"] = self.design.to_json()
        return core

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
        if "configs" in core:
            core["configs"] = [[name, relative(sets)] for name, sets in core["configs"]]
        return {**core, "base_env": relative(core["base_env"]), "axes": axes, "baseline": relative(core["baseline"])}

    @property
    def portable_hash(self) -> str:
        """The plan's identity on any checkout: the same plan file beside the same layout of inputs
        hashes the same wherever it lies (the inputs' contents are the run dirs' to record)."""
        return _digest(self.portable_core())

    def configurations(self) -> list[tuple[str, dict[str, str]]]:
        """(key, values) per configuration: each named one (if any) at every combination of the axes."""
        names = list(self.axes)
        out = []
        for config in self.configs or [None]:
            for combo in itertools.product(*(self.axes[n] for n in names)):
                values = dict(zip(names, combo))
                key = "-".join(part for part in (config, config_label(values)) if part)
                out.append((key, {CONFIG: config, **values} if config else values))
        return out

    def interpolated_keys(self) -> list[str]:
        """The interpolated configurations' keys, in the plan's alpha order (judged after the named ones)."""
        return self.interpolate.keys() if self.interpolate else []

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
        for key, values in self.configurations():
            for seed in seeds or self.seeds:
                members.append(self._member(key, {**(tuned or {}), **values}, seed, "compare", sweep_out))
        return members

    def _member(self, key: str, values: dict[str, str], seed: int, stage: str, sweep_out: Path) -> Member:
        from tatu.daemon.config import ConfigError, load_config

        name = f"{key}-s{seed}"
        run = f"{self.name}.{name}"
        # TATU_EVAL_LINES: every eval's per-line scores, so members can be compared at a common step.
        env = {**self.base_env, **config_variables(values, self.configs), "TATU_SEED": str(seed), "TATU_RUN": run,
               "TATU_OUT": str(sweep_out), "TATU_EVAL_LINES": "1"}
        try:
            load_config(env)
        except ConfigError as exc:
            where = f"[configs] {values[CONFIG]}: member {name}" if CONFIG in values else f"member {name}"
            raise plan_error(self.path, where, str(exc))
        shown = {k: v for k, v in values.items() if k in self.axes or k == self.tune_var or k == CONFIG}
        return Member(name, run, stage, key, shown, seed, env)


def configs_json(configs: dict[str, dict[str, str]]) -> list:
    """[[name, variables], ...]: a list, so the plan's order survives sorted JSON (the lock, the hash)."""
    return [[name, dict(sets)] for name, sets in configs.items()]


def _digest(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


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
            raise plan_error(path, f"[base] {key}", _not_a_run_variable(key, known, "is not a run variable"))
    env.pop("TATU_SEED", None)  # the seeds list says which
    return _resolve_paths(env, path.parent)


def _axes(doc: PlanFile, path: Path, known: set[str]) -> dict[str, list[str]]:
    if not doc.axes and doc.configs is None:
        raise plan_error(path, "[axes]", "at least one axis, e.g. REPLAY_N = [0, 2, 6] (or [configs])")
    axes: dict[str, list[str]] = {}
    for var, values in doc.axes.items():
        if var not in known or var in SWEEP_OWNED or var == "TATU_SEED":
            raise plan_error(path, f"[axes] {var}", _not_a_run_variable(var, known, "is not a run variable")
                             if var not in known else "is not a run variable a sweep may vary (seeds go in `seeds`)")
        if not values:
            raise plan_error(path, f"[axes] {var}", "expected a non-empty list of values")
        shown = [_env_value(v, path, f"[axes] {var}") for v in values]
        if len(set(shown)) != len(shown):
            raise plan_error(path, f"[axes] {var}", f"repeated values in {values}")
        axes[var] = [_resolve_paths({var: s}, path.parent)[var] for s in shown] if var in PATH_VARIABLES else shown
    return axes


def _baseline(doc: PlanFile, path: Path, axes: dict[str, list[str]], configs: dict) -> dict[str, str]:
    baseline = ({CONFIG: next(iter(configs))} if configs else {}) | {var: values[0] for var, values in axes.items()}
    for var, value in doc.decision.baseline.items():
        shown = _env_value(value, path, f"[decision] baseline.{var}")
        if var == CONFIG and shown not in configs:
            raise plan_error(path, f"[decision] baseline.{var}", f"{shown} is not a configuration of [configs] "
                                                                 f"({', '.join(configs) or 'none'})")
        if var != CONFIG and (var not in axes or shown not in axes[var]):
            raise plan_error(path, f"[decision] baseline.{var}", f"{shown} is not a value of an axis")
        baseline[var] = shown
    return baseline


def _tune(plan: Plan, tune: dict, path: Path, known: set[str]) -> Plan:
    """The [tune] stage: one variable, tuned at the baseline, that no axis or configuration sets."""
    tune = dict(tune)
    try:
        tune_seeds = seed_list(tune.pop("seeds", plan.seeds))
    except ValueError as exc:
        raise plan_error(path, "[tune] seeds", str(exc)) from None
    if len(tune) != 1:
        raise plan_error(path, "[tune]", "exactly one variable to tune, e.g. TATU_LR = [1e-3, 3e-3]")
    (var, values), = tune.items()
    if var not in known or var in SWEEP_OWNED or var == "TATU_SEED" or var in plan.axes:
        raise plan_error(path, f"[tune] {var}", _not_a_run_variable(var, known, "is not a run variable")
                         if var not in known else "must be a run variable that is not an axis")
    setting = [name for name, sets in plan.configs.items() if var in sets]
    if setting:
        raise plan_error(path, f"[tune] {var}", f"is set by the configuration {setting[0]}: the tuned value would not reach it")
    if not isinstance(values, list) or len(values) < 2:
        raise plan_error(path, f"[tune] {var}", "expected at least two values to choose from")
    return replace(plan, tune_var=var, tune_values=[_env_value(v, path, f"[tune] {var}") for v in values], tune_seeds=tune_seeds)


def _mde(value, path: Path) -> float:
    """`[decision] mde`: a relative change, "2%" or 0.02, above 0 and below 1."""
    try:
        mde = (float(value[:-1]) / 100 if isinstance(value, str) and value.endswith("%")
               else float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan)
    except ValueError:
        mde = math.nan
    if not 0.0 < mde < 1.0:
        raise plan_error(path, "[decision] mde", f"{value!r}: expected a relative change above 0 and below 1, e.g. \"2%\" or 0.02")
    return mde


def load_plan(path: str | Path, text: str | None = None) -> Plan:
    """The plan file as members, checked whole: every problem is one line and exit 78. With `text`:
    that TOML as the plan file `path` (its relative paths that file's) before it is written."""
    from tatu.daemon.config import known_variables

    path = Path(path)
    doc = read_plan_file(path, text)
    known = set(known_variables())
    env = _base_env(doc, path, known)
    axes = _axes(doc, path, known)
    configs = read_configs(doc, path, known, axes)
    baseline = _baseline(doc, path, axes, configs)
    if doc.decision.rule is None:
        raise plan_error(path, "[decision] rule", "missing: write the decision rule before the results")
    rule = parse_rule(doc.decision.rule, axes, path, list(configs))
    plan = Plan(path, doc.name, doc.question, doc.seeds, env, axes, baseline, rule, configs=configs,
                mde=None if doc.decision.mde is None else _mde(doc.decision.mde, path))
    if doc.tune is not None:
        plan = _tune(plan, doc.tune, path, known)
    plan = replace(plan, design=read_design(doc.design, path, plan.seeds, rule))
    plan = replace(plan, interpolate=read_interpolate(doc.interpolate, path, [key for key, _ in plan.configurations()]))
    if plan.design and plan.interpolate:  # its configurations follow their parent's seeds: nothing of theirs to look at
        raise plan_error(path, "[design] sequential", "not with [interpolate] (an interpolated configuration has no "
                                                      "seeds of its own to look at): use a fixed design")
    # Every member's config is checked now: a bad one is refused before anything runs.
    out = Path("/nonexistent-sweep-out")
    plan.tune_members(out)
    compare = plan.compare_members(out, {plan.tune_var: plan.tune_values[0]} if plan.tune_var else None)
    if configs:
        first_seed = [m for m in compare if m.seed == plan.seeds[0]]
        check_distinct(path, [(m.config_key, m.env) for m in first_seed])
    check_members_data(path, rule, plan.tune_members(out) + compare)  # the sets the rule names, the replay sources
    return plan

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
Every problem is a TatuExit(78) naming the file and the key.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import statistics
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tatu.exitcodes import BAD_CONFIG, TatuExit
from tatu.formats import eval_name_problem

PATH_VARIABLES = ("TATU_DATA", "TATU_SEED_CKPT", "TATU_TRUNK_CKPT")
SWEEP_OWNED = ("TATU_RUN", "TATU_OUT")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,23}$")
PLAN_KEYS = {"name", "question", "seeds", "base", "axes", "decision", "tune"}
METRICS = ("drift", "drift_lo", "drift_hi", "sftHeld_change", "sftHeld_change_lo", "sftHeld_change_hi",
           "every_eval_drift", "every_eval_drift_hi", "aborted")
# A held-out eval set's change, named by its set: `ptNews_change_hi < 0.05` (tatu.formats' set names)
HELD_OUT_METRIC = re.compile(r"^([A-Za-z][A-Za-z0-9]*)_change(_lo|_hi)?$")
# "... such that CONDITIONS [at the end | at the common step]": which comparison the rule judges
# (default the end; the common step is the last eval step every member reached).
RULE = re.compile(r"^\s*(smallest|largest)\s+([A-Z][A-Z0-9_]*)\s+such\s+that\s+(.+?)"
                  r"(?:\s+at\s+the\s+(end|common\s+step))?\s*$")
CONDITION = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*(<=|<)\s*([A-Z][A-Z0-9_]*|[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?%?)\s*$")


def _fail(path: Path, where: str, message: str) -> TatuExit:
    return TatuExit(BAD_CONFIG, f"{path}: {where}: {message}")


@dataclass(frozen=True)
class Condition:
    metric: str
    op: str
    value: str  # a number ("0", "5%") or a run variable (MIX_FORGET_LIMIT), resolved per configuration

    def threshold(self, config: dict) -> float:
        if self.value[0].isalpha():
            return float(config[self.value])
        return float(self.value[:-1]) / 100 if self.value.endswith("%") else float(self.value)

    def holds(self, measured: float, config: dict) -> bool:
        limit = self.threshold(config)
        return measured < limit if self.op == "<" else measured <= limit

    def text(self) -> str:
        return f"{self.metric} {self.op} {self.value}"


@dataclass(frozen=True)
class Rule:
    text: str
    choose: str  # smallest | largest
    axis: str
    conditions: tuple[Condition, ...]
    at: str = "end"  # "end" (each member's last step) | "common" (the last eval step every member reached)


def held_out_set(metric: str) -> str | None:
    """The eval set a `<SET>_change[_lo|_hi]` metric names, other than the judged sftHeld (None if none)."""
    match = HELD_OUT_METRIC.match(metric)
    if match is None or match.group(1) in ("sftHeld", "drift") or eval_name_problem(match.group(1)):
        return None
    return match.group(1)


def parse_rule(text: str, axes: dict, path: Path) -> Rule:
    from tatu.daemon.config import known_variables

    match = RULE.match(text)
    if not match:
        raise _fail(path, "[decision] rule", f"{text!r} is not 'smallest|largest AXIS such that METRIC < VALUE and ... "
                                          f"[at the end | at the common step]'")
    choose, axis, rest, at = match.groups()
    if axis not in axes:
        raise _fail(path, "[decision] rule", f"{axis} is not an axis of the plan (axes: {', '.join(axes)})")
    conditions = []
    for part in re.split(r"\s+and\s+", rest):
        cond = CONDITION.match(part)
        if not cond:
            raise _fail(path, "[decision] rule", f"condition {part.strip()!r} is not 'METRIC < VALUE'")
        metric, op, value = cond.groups()
        if metric not in METRICS and held_out_set(metric) is None:
            raise _fail(path, "[decision] rule", f"unknown metric {metric!r} (known: {', '.join(METRICS)}, "
                                                 "or SET_change[_lo|_hi] of an eval set of the data dir)")
        if value[0].isalpha() and value not in known_variables():
            raise _fail(path, "[decision] rule", f"{value} is neither a number nor a run variable")
        conditions.append(Condition(metric, op, value))
    return Rule(text.strip(), choose, axis, tuple(conditions), "common" if at and at.startswith("common") else "end")


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
        return hashlib.sha256(json.dumps(self.core(), sort_keys=True).encode()).hexdigest()[:16]

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
            raise _fail(self.path, f"member {name}", str(exc))
        shown = {k: v for k, v in values.items() if k in self.axes or k == self.tune_var}
        return Member(name, run, stage, key, shown, seed, env)


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
            raise _fail(path, where, f"{value} is not a finite number")
        return repr(value)
    raise _fail(path, where, f"expected a number or a string, got {type(value).__name__}")


def _seed_list(value, path: Path, where: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value):
        raise _fail(path, where, "expected a non-empty list of non-negative integers")
    if len(set(value)) != len(value):
        raise _fail(path, where, f"repeated seeds in {value}")
    return list(value)


def _resolve_paths(env: dict[str, str], base_dir: Path) -> dict[str, str]:
    out = dict(env)
    for var in PATH_VARIABLES:
        if out.get(var):
            p = Path(out[var])
            out[var] = str((p if p.is_absolute() else base_dir / p).resolve())
    return out


def load_plan(path: str | Path) -> Plan:
    from tatu.daemon.config import known_variables
    from tatu.ops.run_cli import parse_env_file

    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TatuExit(BAD_CONFIG, f"{path}: cannot read the plan ({exc.strerror})")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TatuExit(BAD_CONFIG, f"{path}: not a TOML plan ({exc})")
    unknown = sorted(set(doc) - PLAN_KEYS)
    if unknown:
        raise _fail(path, unknown[0], f"unknown key (known: {', '.join(sorted(PLAN_KEYS))})")
    name = doc.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise _fail(path, "name", f"{name!r}: a plain name of letters, digits, '-' or '_' (at most 24)")
    question = doc.get("question", "")
    seeds = _seed_list(doc.get("seeds"), path, "seeds")
    known = set(known_variables())

    base = doc.get("base", {})
    if not isinstance(base, dict) or set(base) - {"env_file", "vars"}:
        raise _fail(path, "[base]", "expected env_file and/or vars")
    env: dict[str, str] = {}
    if "env_file" in base:
        env_file = Path(base["env_file"])
        env_file = env_file if env_file.is_absolute() else path.parent / env_file
        env.update(parse_env_file(env_file))
    for key, value in (base.get("vars") or {}).items():
        env[key] = _env_value(value, path, f"[base] vars.{key}")
    for key in env:
        if key in SWEEP_OWNED:
            raise _fail(path, f"[base] {key}", "is set by the sweep (members run as <sweep>.<member> in sweeps/<name>/runs)")
        if key not in known:
            raise _fail(path, f"[base] {key}", "is not a run variable")
    env.pop("TATU_SEED", None)  # the seeds list says which
    env = _resolve_paths(env, path.parent)

    axes_doc = doc.get("axes")
    if not isinstance(axes_doc, dict) or not axes_doc:
        raise _fail(path, "[axes]", "at least one axis, e.g. REPLAY_N = [0, 2, 6]")
    axes: dict[str, list[str]] = {}
    for var, values in axes_doc.items():
        if var not in known or var in SWEEP_OWNED or var == "TATU_SEED":
            raise _fail(path, f"[axes] {var}", "is not a run variable a sweep may vary (seeds go in `seeds`)")
        if not isinstance(values, list) or not values:
            raise _fail(path, f"[axes] {var}", "expected a non-empty list of values")
        shown = [_env_value(v, path, f"[axes] {var}") for v in values]
        if len(set(shown)) != len(shown):
            raise _fail(path, f"[axes] {var}", f"repeated values in {values}")
        axes[var] = [_resolve_paths({var: s}, path.parent)[var] for s in shown] if var in PATH_VARIABLES else shown

    decision = doc.get("decision") or {}
    if not isinstance(decision, dict) or set(decision) - {"baseline", "rule"}:
        raise _fail(path, "[decision]", "expected baseline and rule")
    baseline = {var: values[0] for var, values in axes.items()}
    for var, value in (decision.get("baseline") or {}).items():
        shown = _env_value(value, path, f"[decision] baseline.{var}")
        if var not in axes or shown not in axes[var]:
            raise _fail(path, f"[decision] baseline.{var}", f"{shown} is not a value of an axis")
        baseline[var] = shown
    if "rule" not in decision:
        raise _fail(path, "[decision] rule", "missing: write the decision rule before the results")
    rule = parse_rule(str(decision["rule"]), axes, path)

    plan = Plan(path, name, str(question), seeds, env, axes, baseline, rule)
    tune = doc.get("tune")
    if tune is not None:
        tune = dict(tune)
        tune_seeds = _seed_list(tune.pop("seeds", seeds), path, "[tune] seeds")
        if len(tune) != 1:
            raise _fail(path, "[tune]", "exactly one variable to tune, e.g. TATU_LR = [1e-3, 3e-3]")
        (var, values), = tune.items()
        if var not in known or var in SWEEP_OWNED or var == "TATU_SEED" or var in axes:
            raise _fail(path, f"[tune] {var}", "must be a run variable that is not an axis")
        if not isinstance(values, list) or len(values) < 2:
            raise _fail(path, f"[tune] {var}", "expected at least two values to choose from")
        plan.tune_var, plan.tune_values, plan.tune_seeds = var, [_env_value(v, path, f"[tune] {var}") for v in values], tune_seeds
    # Every member's config is checked now: a bad one is refused before anything runs.
    out = Path("/nonexistent-sweep-out")
    plan.tune_members(out)
    plan.compare_members(out, {plan.tune_var: plan.tune_values[0]} if plan.tune_var else None)
    return plan


# --- cost ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StepCost:
    seconds_per_slot: float  # seconds per micro-batch x micro_batch x seq_len of a training step
    eval_seconds: float
    source: str


def measured_cost(runs: list[Path]) -> StepCost | None:
    """Step and eval times measured by earlier runs of this machine (their events.jsonl and the
    config in their checkpoints' meta.json)."""
    from tatu.daemon.logs import read_events

    slots, evals, used = [], [], []
    for run_dir in runs:
        events_path = run_dir / "events.jsonl"
        config = None
        for ckpt in ("final", "state", "best"):
            meta = run_dir / ckpt / "meta.json"
            if meta.is_file():
                config = json.loads(meta.read_text()).get("config")
                break
        if not events_path.is_file() or not config:
            continue
        events = read_events(events_path)
        steps = [e["seconds"] for e in events if e.get("event") == "step" and e.get("seconds")]
        if not steps:
            continue
        n_micro = int(config.get("SFT_GE", 0)) + (int(config.get("REPLAY_N", 0)) if config.get("TATU_MODE") == "sft" else 0)
        slot = max(1, n_micro) * int(config.get("TATU_MICRO_BATCH", 8)) * int(config.get("TATU_SEQ_LEN", 128))
        slots.append(statistics.median(steps) / slot)
        evals += [e["seconds"] for e in events if e.get("event") == "eval" and e.get("step", 0) > 0]
        used.append(run_dir.name)
    if not slots:
        return None
    return StepCost(statistics.median(slots), statistics.median(evals) if evals else 0.0, ", ".join(used[:3]))


def member_seconds(member: Member, cost: StepCost) -> float:
    env = member.env
    steps = int(env.get("MIX_STEPS_LIMIT", 200))
    n_micro = int(env.get("SFT_GE", 8)) + int(env.get("REPLAY_N", 0))
    slot = n_micro * int(env.get("TATU_MICRO_BATCH", 8)) * int(env.get("TATU_SEQ_LEN", 128))
    evals = steps // int(env.get("EVAL_EVERY", 8)) + 2  # the baseline and the last step
    return steps * slot * cost.seconds_per_slot + evals * cost.eval_seconds


def fmt_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else (f"{rest // 60}m{rest % 60:02d}s" if rest >= 60 else f"{rest}s")

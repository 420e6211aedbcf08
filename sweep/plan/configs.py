"""A plan's named configurations: `[configs]` NAME = { VAR = value, ... }, each a set of run
variables over [base]. They are compared with one another as an axis's values are (with the
baseline, by the rule, across seeds), and differ in as many variables as they like:

    [configs]
    lora-r8 = { TATU_TRAIN = "lora", TATU_LORA_RANK = 8 }
    full-replay6 = { REPLAY_N = 6 }
    full = {}                                   # [base] as it is

With [axes] as well, every configuration runs at every combination of the axes' values (a
configuration may not set an axis). Members are named `<config>[-<axis labels>]-s<seed>`; the
baseline names one as `config = "full"`, and a rule chooses among them in the plan's order with
`first config such that ...`."""
from __future__ import annotations

import re
from pathlib import Path

from tatu.names import nearest
from tatu.sweep.plan.file import PlanFile
from tatu.sweep.plan.rule import CONFIG, plan_error
from tatu.sweep.plan.values import SWEEP_OWNED, env_value, resolve_paths

CONFIG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,23}$")
EXAMPLE = 'lora-r8 = { TATU_TRAIN = "lora", TATU_LORA_RANK = 8 }'


def read_configs(doc: PlanFile, path: Path, known: set[str], axes: dict) -> dict[str, dict[str, str]]:
    """name -> the variables it sets (environment strings, paths absolute), in the plan's order."""
    if doc.configs is None:
        return {}
    if not doc.configs:
        raise plan_error(path, "[configs]", f"at least one configuration, e.g. {EXAMPLE}")
    configs: dict[str, dict[str, str]] = {}
    for name, variables in doc.configs.items():
        where = f"[configs] {name}"
        if not CONFIG_NAME.match(name) or name.lower().startswith("tune"):
            raise plan_error(path, where, "a configuration's name is letters, digits, '-' or '_' (at most 24), "
                                          "not starting with 'tune' (the tune stage's members are named so)")
        sets = {}
        for var, value in variables.items():
            if var in axes:
                raise plan_error(path, f"{where}.{var}", "is an axis of the plan: a configuration may not set it too "
                                                         "(every configuration runs at every value of the axes)")
            if var not in known:
                meant = nearest(var, sorted(known - set(SWEEP_OWNED) - {"TATU_SEED"}))
                raise plan_error(path, f"{where}.{var}", "is not a run variable" + (f" (did you mean {meant}?)" if meant else ""))
            if var in SWEEP_OWNED or var == "TATU_SEED":
                raise plan_error(path, f"{where}.{var}", "is not a run variable a configuration may set (seeds go in `seeds`)")
            sets[var] = env_value(value, path, f"{where}.{var}")
        configs[name] = resolve_paths(sets, path.parent)
    return configs


def config_variables(values: dict[str, str], configs: dict[str, dict[str, str]]) -> dict[str, str]:
    """A member's values (its configuration's name, axis and tune values) -> the run variables they set."""
    named = configs[values[CONFIG]] if CONFIG in values else {}
    return {**named, **{k: v for k, v in values.items() if k != CONFIG}}


def check_distinct(path: Path, configurations: list[tuple[str, dict]]) -> None:
    """Two configurations that would run the same effective config are one measured twice: refused.

    `configurations`: (the configuration's key, its member's full environment) per configuration."""
    from tatu.daemon.config import load_config

    seen: dict[str, str] = {}
    for key, env in configurations:
        effective = load_config(env)[0].to_json()
        effective.pop("TATU_RUN", None)
        fingerprint = repr(sorted(effective.items()))
        if fingerprint in seen:
            raise plan_error(path, f"[configs] {key}", f"runs the same configuration as {seen[fingerprint]} "
                                                       "(every variable it sets has the same effective value)")
        seen[fingerprint] = key


def describe_configs(configs: dict[str, dict[str, str]]) -> dict[str, str]:
    """name -> `TATU_LORA_RANK=8 TATU_TRAIN=lora` (sorted, as the lock keeps them; `(the base)` for none)."""
    return {name: " ".join(f"{k}={v}" for k, v in sorted(sets.items())) or "(the base)" for name, sets in configs.items()}

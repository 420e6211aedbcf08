"""A sweep plan's TOML as written: its keys and their types, validated by pydantic as the run
config is (RunConfig); what the plan means is tatu.sweep.plan.load's. Errors are one line naming the
file and the key, exit 78."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from tatu.exitcodes import BAD_CONFIG
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.rule import plan_error

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,23}$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Base(_Section):
    env_file: str | None = None
    vars: dict[str, Any] = {}


class _Decision(_Section):
    baseline: dict[str, Any] = {}
    rule: str | None = None
    mde: Any = None  # the effect "seeds for MDE" is stated for: "2%" or 0.02 (checked by sweep/plan/load.py's _mde)


class PlanFile(_Section):
    """The plan's TOML as written: its keys and their types (what it means: `load_plan`)."""
    name: str
    question: str = ""
    seeds: list[int]
    base: _Base = _Base()
    axes: dict[str, list[Any]] = {}
    configs: dict[str, dict[str, Any]] | None = None  # name -> { VAR = value, ... } (tatu.sweep.plan.configs)
    decision: _Decision = _Decision()
    tune: dict[str, Any] | None = None
    interpolate: dict[str, Any] | None = None  # config, alphas (tatu.sweep.plan.interpolated)
    design: dict[str, Any] | None = None  # sequential, min_seeds, max_seeds (tatu.sweep.plan.design)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if not NAME_PATTERN.match(name):
            raise ValueError(f"{name!r}: a plain name of letters, digits, '-' or '_' (at most 24)")
        return name

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int]) -> list[int]:
        return seed_list(seeds)


def seed_list(seeds) -> list[int]:
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ValueError("expected a non-empty list of non-negative integers")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"repeated seeds in {seeds}")
    return list(seeds)


_SECTIONS = {"base": "[base]", "axes": "[axes]", "configs": "[configs]", "decision": "[decision]", "tune": "[tune]", "interpolate": "[interpolate]", "design": "[design]"}


def _validation_error(path: Path, exc: ValidationError) -> SweepError:
    """pydantic's first error as `FILE: [section] key: message`."""
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    where = " ".join([_SECTIONS[loc[0]], *loc[1:]]) if loc[0] in _SECTIONS else ".".join(loc)
    if error["type"] == "extra_forbidden":
        model = PlanFile if len(loc) == 1 else {"base": _Base, "decision": _Decision}[loc[0]]
        return plan_error(path, where, f"unknown key (known: {', '.join(sorted(model.model_fields))})")
    message = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
    return plan_error(path, where, message)


def read_plan_file(path: Path, text: str | None = None) -> PlanFile:
    """`text`: the plan's TOML as if `path` held it (a generated plan, checked before it is written)."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8") if text is None else text)
    except OSError as exc:
        raise SweepError(BAD_CONFIG, f"{path}: cannot read the plan ({exc.strerror})")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SweepError(BAD_CONFIG, f"{path}: not a TOML plan ({exc})")
    try:
        return PlanFile.model_validate(doc)
    except ValidationError as exc:
        raise _validation_error(path, exc) from None

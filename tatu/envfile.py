"""Env files as systemd's EnvironmentFile= reads them: what a unit, `tatu smoke --env-file`, a
sweep plan's base env and the sweep's members share."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Union

from tatu.exitcodes import BAD_CONFIG

# IEEE doubles hold 15 significant decimal digits exactly: a decimal of at most 15 digits survives
# the trip to a float and back, so a value computed from written numbers (0.003 / 10) is written
# as the number meant (0.0003) and not as its float's 17 digits (0.00030000000000000003).
PERSON_DIGITS = 15

EnvValue = Union[str, int, float, Path]


class EnvFileError(ValueError):
    """An env file that cannot be read or is not KEY=VALUE lines: one line naming the file (and
    line). Exit 78 wherever it ends a process: the entry points of its callers (ops/cli.py, the
    sweep coordinator) exit with `code`; TatuExit is the command line's own."""

    code = BAD_CONFIG


def parse_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile reads them (comments, quotes)."""
    return {key: value for key, (value, _) in parse_env_file_lines(path).items()}


def parse_env_file_lines(path: Path) -> dict[str, tuple[str, int]]:
    """KEY -> (VALUE, the number of the line that set it): for messages that name the line."""
    values = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvFileError(f"{path}: cannot read ({exc})")
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip().replace("_", "").isalnum():
            raise EnvFileError(f"{path}:{number}: expected KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = (value, number)
    return values


def env_value(value: EnvValue) -> str:
    """A variable's value as a person writes it: a float to PERSON_DIGITS significant digits, in
    Python's shortest form of that (0.003 / 10 -> "0.0003", 3e-5 -> "3e-05"); anything else as str.
    The text may read back as a float an ulp or two from `value`: whoever writes a run's env file
    runs the run with these same strings, so the file says exactly what ran."""
    if isinstance(value, float):
        return repr(float(f"{value:.{PERSON_DIGITS}g}"))
    return str(value)


def env_file_text(env: Mapping[str, EnvValue]) -> str:
    """The env file that parse_env_file reads back as `env` (values hold no newline), each value
    as env_value writes it."""
    return "".join(f"{key}={env_value(value)}\n" for key, value in env.items())

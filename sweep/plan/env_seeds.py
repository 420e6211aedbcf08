"""`tatu sweep plan|start --env-file RUN.env --seeds N`: one run's exact configuration at N seeds,
as an ordinary plan file (sweeps/<name>/plan.toml) that the rest of the sweep reads like any other.

What the generated plan holds, and why:
- [base] every variable of the env file, as its text, but TATU_RUN, TATU_OUT (the sweep's: members
  run as <sweep>.<member> in sweeps/<name>/runs), TATU_SEED (the seeds list) and TATU_EVAL_LINES
  (a sweep member always keeps its per-line scores). Relative paths are resolved from the current
  directory, as `tatu run --env-file` reads them, and written absolute.
- seeds: the run's own TATU_SEED first, then the next N-1 integers, so the operator's own run is
  one of the members. N >= 2: a CI over seeds needs two (one seed is the run itself).
- one named configuration, the run's name (TATU_RUN) when that is a configuration name, else one
  derived from it (`derived_name`: the run `demo-replay.replay-n6-s1`, a sweep member, is the
  configuration `demo-replay-replay-n6-s1`; the sweep says so), set to nothing over [base], and the rule
  `first config such that drift_hi < MIX_FORGET_LIMIT and every_eval_drift_hi < MIX_FORGET_LIMIT
  and sftHeld_change_hi < -TATU_VERDICT_MIN_GAIN`: the daemon's own verdict criteria (its
  judge.verdict: holds when sftHeld's CI upper bound is below -TATU_VERDICT_MIN_GAIN and drift stays
  under MIX_FORGET_LIMIT at every eval), with CIs over seeds x lines. The same rule language as
  every plan; with one configuration the verdict reads `run5 holds across 3 seeds` (tatu.sweep.judge.verdict.one_config_line).
- the sweep's name: `<TATU_RUN>-seeds` (derived the same way when that is not a plain name), or --name.

The question names neither N nor the env file's path, so a larger N adds seeds to the same
locked sweep and the same env file elsewhere continues it; any other change to the env file is
a changed plan (lock.reconcile: exit 78).

`--sequential` (N >= 3): the same question as a group-sequential decision (docs/sweeps.md,
"Sequential seeds"): `[design] sequential = "obf"`, min_seeds = 3, max_seeds = N, so the sweep
stops at the first look that decides the run's criteria. The sweep is `<TATU_RUN>-seq` (a design
is part of the plan: a fixed `-seeds` sweep of the same run stays its own), and its N is in the
design, so another N is another plan."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from tatu.atomic import write_atomic
from tatu.envfile import EnvFileError, parse_env_file_lines
from tatu.exitcodes import BAD_CONFIG, USAGE
from tatu.sweep.plan.configs import CONFIG_NAME
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.load import Plan, load_plan
from tatu.sweep.plan.file import NAME_PATTERN
from tatu.sweep.plan.values import PATH_VARIABLES, SWEEP_OWNED

PLAN_FILE = "plan.toml"
# Set by the sweep for every member, whatever the env file says (plan.Plan._member).
NOT_COPIED = (*SWEEP_OWNED, "TATU_SEED", "TATU_EVAL_LINES")
MIN_SEEDS = 2
NAME_LIMIT = 24  # configuration and sweep names (CONFIG_NAME, NAME_PATTERN)
SWEEP_SUFFIX = "-seeds"
SEQUENTIAL_SUFFIX = "-seq"
SEQUENTIAL_SHAPE = "obf"  # the default design (docs/sweeps.md: Pocock loses power at -1 SD)
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_-]+")
HASH_CHARS = 6


def derived_name(run: str, limit: int = NAME_LIMIT) -> str:
    """A plain name (letters, digits, '-', '_'; a letter or digit first; at most `limit`) for the
    run name `run`, the same for the same run every time: the run's own name when it is one; else
    each run of other characters becomes '-' (`demo-replay.replay-n6-s1` -> `demo-replay-replay-n6-s1`),
    a leading '-'/'_' goes, a name starting with 'tune' (the tune stage's members') gets 'r-' in front,
    and a name still over `limit` is cut to leave room for '-' and 6 hex digits of the run name's
    sha1, so two long runs that share a beginning get two names."""
    if len(run) <= limit and CONFIG_NAME.match(run) and not run.lower().startswith("tune"):
        return run
    name = _NOT_IN_A_NAME.sub("-", run).lstrip("-_") or "run"
    if name.lower().startswith("tune"):
        name = "r-" + name
    if len(name) <= limit and name != run:
        return name
    digest = hashlib.sha1(run.encode("utf-8")).hexdigest()[:HASH_CHARS]
    return f"{name[:limit - HASH_CHARS - 1].rstrip('-_')}-{digest}"


@dataclass(frozen=True)
class SeedsPlan:
    """The generated plan: where it is written, its TOML, and that TOML loaded as the file there."""

    path: Path
    text: str
    plan: Plan
    derived: str | None = None  # how the configuration's (and sweep's) name came from TATU_RUN, when not the run's own


    def written(self) -> bool:
        return self.path.is_file() and self.path.read_text(encoding="utf-8") == self.text


def rule_text(min_gain: float) -> str:
    """The daemon's verdict criteria as a sweep rule (TATU_VERDICT_MIN_GAIN as a number: the rule
    language compares with a number or a run variable, not a negated one)."""
    improve = "0" if min_gain == 0 else repr(-min_gain)
    return ("first config such that drift_hi < MIX_FORGET_LIMIT and every_eval_drift_hi < MIX_FORGET_LIMIT "
            f"and sftHeld_change_hi < {improve}")


def _problem(env_file: Path, line: int | None, message: str) -> SweepError:
    return SweepError(BAD_CONFIG, f"{env_file}{f':{line}' if line else ''}: {message}")


def _run_env(env_file: Path) -> tuple[dict[str, str], dict[str, int]]:
    """The env file's run variables (values as written) and each one's line; one line per problem."""
    from tatu.daemon.config import ConfigError, check_unknown, known_variables, load_layers

    try:
        numbered = parse_env_file_lines(env_file)
    except EnvFileError as exc:
        raise SweepError(exc.code, str(exc))
    env = {key: value for key, (value, _) in numbered.items()}
    lines = {key: number for key, (_, number) in numbered.items()}
    known = set(known_variables())
    for key, number in lines.items():
        if key not in known:
            try:
                check_unknown({key: ""})  # a run variable's prefix: the daemon's own message (did you mean ...?)
            except ConfigError as exc:
                raise _problem(env_file, number, str(exc))
            raise _problem(env_file, number, f"{key} is not a run variable: a seeds sweep gives its members the run's "
                                             "variables only (the thread count is TATU_THREADS)")
    try:  # a bad value is named at its line (FILE:LINE: VAR=VALUE: reason)
        config, _ = load_layers([("env-file", env)], lambda variable, _: f"{env_file}:{lines[variable]}"
                                if variable in lines else None)
    except ConfigError as exc:
        raise SweepError(BAD_CONFIG, str(exc) if str(exc).startswith(f"{env_file}:") else f"{env_file}: {exc}")
    if config.mode != "sft":
        raise _problem(env_file, lines.get("TATU_MODE"), f"TATU_MODE={config.mode}: a seeds sweep judges an SFT run's "
                                                         "criteria (drift, the sftHeld change)")
    return env, lines


def _resolved(env: dict[str, str], lines: dict[str, int], env_file: Path) -> dict[str, str]:
    """Relative paths from the current directory (as `tatu run --env-file` reads them), absolute;
    a path that does not exist is refused now rather than by every member."""
    out = dict(env)
    for var in PATH_VARIABLES:
        if out.get(var):
            path = Path(out[var]).expanduser()
            absolute = (path if path.is_absolute() else Path.cwd() / path).resolve()
            if not absolute.exists():
                raise _problem(env_file, lines[var], f"{var}={env[var]}: {absolute} does not exist (relative paths are "
                                                     "read from the current directory, as `tatu run --env-file` reads them)")
            out[var] = str(absolute)
    return out


def _toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a TOML basic string: JSON's escapes are TOML's


def design_toml(seeds: list[int]) -> str:
    """`[design]` of `--sequential`: looks from 3 seeds to all of them."""
    return (f"\n[design]\nsequential = {_toml_string(SEQUENTIAL_SHAPE)}\nmin_seeds = 3\nmax_seeds = {len(seeds)}\n")


def plan_toml(name: str, config_name: str, env: dict[str, str], seeds: list[int], rule: str, env_file: Path,
              run: str | None = None, sequential: bool = False) -> str:
    run = run or config_name
    who = config_name if run == config_name else f"{config_name} (the run {run})"
    variables = "".join(f"{key} = {_toml_string(value)}\n" for key, value in env.items() if key not in NOT_COPIED)
    flag = " --sequential" if sequential else ""
    return f"""# Generated by `tatu sweep start|plan --env-file {env_file} --seeds {len(seeds)}{flag}` (sweep/plan/env_seeds.py):
# the run {run}'s configuration, every variable of its env file, at {len(seeds)} TATU_SEEDs (its own
# first), judged by the run's own verdict criteria over seeds. An ordinary plan: `tatu sweep plan` reads it.
name = {_toml_string(name)}
question = {_toml_string(f"Does {who} hold across seeds by its own criteria (sftHeld improves; drift under MIX_FORGET_LIMIT at the end and at every eval)?")}
seeds = [{", ".join(str(s) for s in seeds)}]

[base.vars]
{variables}
[configs]
{config_name} = {{}}

[decision]
rule = {_toml_string(rule)}
""" + (design_toml(seeds) if sequential else "")


def seeds_plan(env_file: Path, n_seeds: int, sweeps: Path, name: str | None = None,
               sequential: bool = False) -> SeedsPlan:
    """The plan `--env-file ENV_FILE --seeds N [--sequential]` runs, loaded and checked as the file it
    will be (nothing is written: `write` does that, once the lock accepts it)."""
    from tatu.daemon.config import load_config
    from tatu.evals.seeds.sequential import DEFAULT_MIN_SEEDS

    if n_seeds < MIN_SEEDS:
        raise SweepError(USAGE, f"--seeds {n_seeds}: at least {MIN_SEEDS} (a CI over seeds needs two; the run "
                                "itself is one)")
    if sequential and n_seeds < DEFAULT_MIN_SEEDS:
        raise SweepError(USAGE, f"--seeds {n_seeds} --sequential: at least {DEFAULT_MIN_SEEDS} (the first look is at "
                                f"{DEFAULT_MIN_SEEDS} seeds; --seeds is the most it may run)")
    suffix = SEQUENTIAL_SUFFIX if sequential else SWEEP_SUFFIX
    env, lines = _run_env(env_file)
    config, _ = load_config(env)
    run = config.run
    config_name = derived_name(run)
    sweep_name = name or (f"{run}{suffix}" if NAME_PATTERN.match(f"{run}{suffix}") and run == config_name
                          else f"{derived_name(run, NAME_LIMIT - len(suffix))}{suffix}")
    if not NAME_PATTERN.match(sweep_name):  # only --name can be
        raise SweepError(USAGE, f"--name: letters, digits, '-' or '_' (at most {NAME_LIMIT})")
    derived = None
    where = f"TATU_RUN={run} ({env_file}:{lines.get('TATU_RUN')})"
    if config_name != run:
        derived = (f"{where} is not a configuration name (letters, digits, '-', '_', at most {NAME_LIMIT}, not "
                   f"'tune...'): the configuration is {config_name}" + ("" if name else f", the sweep {sweep_name}"))
    elif not name and sweep_name != f"{run}{suffix}":
        derived = f"{where}: {run}{suffix} is over {NAME_LIMIT} characters: the sweep is {sweep_name}"
    seeds = [config.seed + i for i in range(n_seeds)]
    text = plan_toml(sweep_name, config_name, _resolved(env, lines, env_file), seeds, rule_text(config.verdict_min_gain),
                     env_file, run, sequential)
    path = (sweeps / sweep_name / PLAN_FILE).absolute()
    return SeedsPlan(path, text, load_plan(path, text), derived)


def write(seeds: SeedsPlan) -> None:
    """sweeps/<name>/plan.toml, atomically, unless it already holds this text."""
    if seeds.written():
        return
    seeds.path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(seeds.path, seeds.text)


def plan_or_env_file(args) -> tuple[Plan, SeedsPlan | None]:
    """`tatu sweep plan|start`'s plan: the plan file, or the one --env-file and --seeds generate
    (then also returned as a SeedsPlan, for `start` to write). Both or neither is a usage error."""
    if (args.plan is None) == (args.env_file is None):
        raise SweepError(USAGE, f"tatu sweep {args.action}: give a plan file or --env-file RUN.env --seeds N"
                                + (", not both" if args.plan is not None else ""))
    sequential = bool(getattr(args, "sequential", False))
    if args.env_file is None:
        extra = [flag for flag, value in (("--seeds", args.seeds), ("--name", args.name),
                                          ("--sequential", True if sequential else None)) if value is not None]
        if extra:
            raise SweepError(USAGE, f"tatu sweep {args.action}: {' and '.join(extra)} go with --env-file "
                                    "(a plan file lists its own seeds and name)")
        return load_plan(args.plan), None
    if args.seeds is None:
        raise SweepError(USAGE, f"tatu sweep {args.action} --env-file: --seeds N is required (at least {MIN_SEEDS})")
    generated = seeds_plan(args.env_file, args.seeds, args.sweeps, args.name, sequential)
    return generated.plan, generated

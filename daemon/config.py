"""The run's configuration: environment variables (a unit's EnvironmentFile) -> RunConfig.

Typo-proof: any variable under the project's prefixes that is not a known field is an error
naming the closest known one (REPLAY_M -> "did you mean REPLAY_N?"), and so is any other name one
edit from a known one (SFTGE, sft_ge: tatu/names.py), while the environment's own variables (PATH,
OMP_NUM_THREADS, ...) pass. An env file is stricter (check_env_file): every name in it is a known
one, or the refusal names its file and line. Every value is range
checked; a fraction above 1 is refused as a percent typed as a number. RunConfig is a plain
pydantic model validated from the mapping `load_config` is given, layer by layer, and from
nothing else: no settings source reads os.environ behind its back, so every printed source
is true. An empty value means unset, in every layer. This module must not import torch: a bad
config exits 78 in well under 2 s.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Literal, Mapping, Sequence, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tatu.daemon.retention.spec import RetentionConfig, RunFacts, check_retention
from tatu.data.replay import ReplaySources
from tatu.envfile import EnvFileError, parse_env_file_lines
from tatu.names import nearest, one_edit_from
from tatu.model.train_spec import LoraSpec, TrainSpec, TrainSpecError, check_layers, parse_targets, parse_train

PREFIXES = ("SFT_", "REPLAY_", "MIX_", "EVAL_", "TATU_")
# Variables of tatu's that are not settings of the run: the process environment may hold them, an
# env file may not. TATU_ENV_FILE is the env file a unit gave its variables from (Environment=
# TATU_ENV_FILE=%E/tatu/%i.env: systemd expands %E, so the daemon checks the file systemd read).
PROCESS_VARIABLES = ("TATU_ENV_FILE",)
# Variables a person puts in an env file for the process that tatu sets its own way.
_TATU_WAY = {"OMP_NUM_THREADS": "TATU_THREADS", "MKL_NUM_THREADS": "TATU_THREADS"}
# torchrun reads its options from PET_<OPTION> variables: the DDP unit's documented place for them is
# the run's env file (units/tatu-sft-ddp@.service), which the launcher and every rank read.
TORCHRUN_PREFIX = "PET_"


@functools.cache
def torchrun_variables() -> list[str]:
    """The PET_ names torchrun reads (torch.distributed.argparse_util.env: "PET_" + the option's dest)."""
    from torch.distributed.run import get_args_parser  # torch only when a file holds a PET_ name

    return sorted({TORCHRUN_PREFIX + action.dest.upper() for action in get_args_parser()._actions
                   if action.option_strings and action.dest != "help"})


class ConfigError(ValueError):
    pass


# Fields that are fractions (0.05 = 5%); TATU_DROPOUT is a probability, below 1.
FRACTIONS = ("mix_forget_limit", "trunk_limit", "verdict_min_gain", "dropout")


class _RunFields(BaseModel):
    """The run's own variables (RunConfig below adds the retention terms' section)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    # --- the mix (the operator's run 5: SFT_GE 8 + REPLAY_N 6 = 43% English tokens) ---
    sft_ge: int = Field(8, alias="SFT_GE", ge=0, le=1024,
                        description="SFT micro-batches per optimizer step (TATU_MODE=pretrain: pretraining micro-batches)")
    replay_n: int = Field(0, alias="REPLAY_N", ge=0, le=1024, description="replay micro-batches per step")
    # tatu.data.replay: a share is the fraction of the run's replay micro-batches read from that text channel
    replay_sources_text: str | None = Field(
        None, alias="REPLAY_SOURCES",
        description="text channels of TATU_DATA the replay micro-batches come from, with shares of them summing "
                    "to 1: replay:0.5,ptReplay:0.5 (unset: the channel replay)")
    mix_steps_limit: int = Field(200, alias="MIX_STEPS_LIMIT", ge=1, le=10_000_000, description="optimizer steps")
    mix_forget_limit: float = Field(0.10, alias="MIX_FORGET_LIMIT", gt=0, description="abort when drift exceeds this")
    mix_forget_ci: bool = Field(False, alias="MIX_FORGET_CI", description="abort only when drift's CI lower bound exceeds the limit")
    mix_forecast_abort: bool = Field(False, alias="MIX_FORECAST_ABORT",
                                     description="abort when the drift forecast's 90% lower bound at MIX_STEPS_LIMIT "
                                                 "exceeds the limit (from the third eval)")
    # --- evaluation ---
    eval_every: int = Field(8, alias="EVAL_EVERY", ge=1, le=1_000_000)
    eval_en_all: bool = Field(True, alias="EVAL_EN_ALL", description="score every enRuler line (0: a subsample)")
    # EVAL_EN_ALL=0 scores EVAL_EN_BATCHES x EVAL_BATCH ruler lines drawn at random by TATU_SEED
    # (evals.sets.sample_lines): the operator's names; EVAL_BATCH sizes that subsample, it is
    # not a scoring batch.
    eval_en_batches: int = Field(8, alias="EVAL_EN_BATCHES", ge=1, le=100_000)
    eval_en_lines_per_batch: int = Field(2, alias="EVAL_BATCH", ge=1, le=100_000,
                                         description="ruler lines per EVAL_EN_BATCHES when EVAL_EN_ALL=0")
    eval_lines: bool = Field(False, alias="TATU_EVAL_LINES",
                             description="keep each eval's per-line scores (every set and its word categories) "
                                         "in RUN_DIR/evals/step-N.json (sweeps set it)")
    tensorboard: str = Field("auto", alias="TATU_TENSORBOARD",
                             description="auto (RUN_DIR/tb when the tensorboard package imports) | off | DIR (writes DIR/TATU_RUN)")
    # --- run identity and paths ---
    run: str = Field("run", alias="TATU_RUN", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    out: Path = Field(Path("runs"), alias="TATU_OUT", description="parent directory of run directories")
    mode: Literal["sft", "pretrain"] = Field("sft", alias="TATU_MODE")
    seed_ckpt: Path | None = Field(None, alias="TATU_SEED_CKPT", description="checkpoint to start from")
    trunk_ckpt: Path | None = Field(None, alias="TATU_TRUNK_CKPT", description="trunk for drift_tronco when the seed lacks it")
    data: Path = Field(..., alias="TATU_DATA", description="data directory written by `tatu data build`")
    device: str = Field("auto", alias="TATU_DEVICE", pattern=r"^(auto|cpu|cuda(:\d+)?|mps)$")
    seed: int = Field(1337, alias="TATU_SEED", ge=0, le=2**31 - 1)
    # CPU float reductions follow the thread count: a run reproduces bit for bit only at the same count.
    threads: int | None = Field(None, alias="TATU_THREADS", ge=1, le=1024,
                                description="torch's intra-op threads (unset: torch's default, which OMP_NUM_THREADS sets)")
    # model/precision.py decides what auto means on the device; the run keeps what it resolved to
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", alias="TATU_PRECISION", description="training step autocast: auto = bf16 where the device has it natively")
    # --- optimisation ---
    lr: float = Field(3e-4, alias="TATU_LR", gt=0, le=10)
    min_lr: float = Field(0.0, alias="TATU_MIN_LR", ge=0, le=10)
    warmup_steps: int = Field(0, alias="TATU_WARMUP_STEPS", ge=0, le=10_000_000)
    schedule: Literal["constant", "cosine"] = Field("constant", alias="TATU_SCHEDULE")
    weight_decay: float = Field(0.1, alias="TATU_WEIGHT_DECAY", ge=0, le=10)
    beta1: float = Field(0.9, alias="TATU_BETA1", ge=0, lt=1)
    beta2: float = Field(0.95, alias="TATU_BETA2", ge=0, lt=1)
    grad_clip: float = Field(1.0, alias="TATU_GRAD_CLIP", ge=0, le=1e6, description="0 disables clipping")
    micro_batch: int = Field(8, alias="TATU_MICRO_BATCH", ge=1, le=4096)
    seq_len: int = Field(128, alias="TATU_SEQ_LEN", ge=2, le=65536,
                         description="unset: the data's --seq-len (its manifest), else 128")
    dropout: float = Field(0.0, alias="TATU_DROPOUT", ge=0, lt=1)
    # --- a trunk from scratch (TATU_MODE=pretrain without TATU_SEED_CKPT) ---
    n_layer: int = Field(4, alias="TATU_N_LAYER", ge=1, le=128)
    n_head: int = Field(4, alias="TATU_N_HEAD", ge=1, le=128)
    n_embd: int = Field(128, alias="TATU_N_EMBD", ge=8, le=16384)
    block_size: int = Field(128, alias="TATU_BLOCK_SIZE", ge=2, le=65536)
    # --- checkpoints, decisions, memory ---
    ckpt_every: int = Field(50, alias="TATU_CKPT_EVERY", ge=1, le=10_000_000)
    trunk_limit: float | None = Field(None, alias="TATU_TRUNK_LIMIT", gt=0, description="trunk_ok when drift_tronco <= this")
    verdict_min_gain: float = Field(0.0, alias="TATU_VERDICT_MIN_GAIN", ge=0, lt=1, description="sftHeld must fall by more than this and its CI")
    mem_floor_mb: int = Field(1024, alias="TATU_MEM_FLOOR_MB", ge=0, le=10_000_000, description="save early when available memory drops under this")
    eval_resamples: int = Field(2000, alias="TATU_EVAL_RESAMPLES", ge=100, le=1_000_000)
    gen_prompts: int = Field(8, alias="TATU_GEN_PROMPTS", ge=0, le=1024, description="sftHeld prompts generated at each eval")
    gen_tokens: int = Field(24, alias="TATU_GEN_TOKENS", ge=1, le=4096)
    fault_nan_step: int | None = Field(None, alias="TATU_FAULT_NAN_STEP", ge=1, description="testing: make the loss of this step NaN")
    # --- which weights train (model/train_spec.py); unset LoRA values take the defaults below ---
    train: str = Field("all", alias="TATU_TRAIN", description="all | top:K (last K blocks + ln_f) | lora")
    train_embeddings: bool | None = Field(None, alias="TATU_TRAIN_EMBEDDINGS",
                                          description="outside TATU_TRAIN=all: train wte (tied to the head) and wpe")
    lora_rank: int | None = Field(None, alias="TATU_LORA_RANK", ge=1, le=4096, description="adapter rank (default 8)")
    lora_alpha: float | None = Field(None, alias="TATU_LORA_ALPHA", gt=0, le=1e6, description="default 2 x rank")
    lora_dropout: float | None = Field(None, alias="TATU_LORA_DROPOUT", ge=0, lt=1, description="default 0")
    lora_targets: str | None = Field(None, alias="TATU_LORA_TARGETS", description="default attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj")
    lora_layers: str | None = Field(None, alias="TATU_LORA_LAYERS", description="all | top:K | 0,2,5 (default all)")


class RunConfig(RetentionConfig, _RunFields):
    """Every knob of a run, one flat set of variables: the fields above, then the retention terms'
    section (daemon/retention/spec.py: RetentionConfig, its fields last). The alias is the
    environment variable (the operator's names)."""

    @field_validator(*FRACTIONS, mode="before")
    @classmethod
    def _a_fraction(cls, value):
        # 5 for "5%" would make a limit of +500%: a limit that never trips, silently.
        try:
            number = float(value)
        except (TypeError, ValueError):
            return value  # pydantic's own message names the bad type
        if number > 1:
            raise ValueError(f"a fraction (0.05 = 5%) is at most 1: did you mean {number / 100:g}?")
        return value

    @field_validator("replay_sources_text")
    @classmethod
    def _sources(cls, value: str | None) -> str | None:
        if value is not None:
            ReplaySources.parse(value)  # its problem, in one line; the value stays as the operator wrote it
        return value

    @model_validator(mode="after")
    def _coherent(self) -> "RunConfig":
        if self.mode == "sft" and self.seed_ckpt is None:
            raise ValueError("TATU_SEED_CKPT is required when TATU_MODE=sft")
        if self.mode == "sft" and self.sft_ge + self.replay_n == 0:
            raise ValueError("SFT_GE + REPLAY_N must be at least 1 (a step needs micro-batches)")
        if self.mode == "pretrain" and self.replay_n:
            raise ValueError("REPLAY_N must be 0 when TATU_MODE=pretrain (one channel)")
        if self.replay_sources_text is not None and not (self.mode == "sft" and self.replay_n):
            raise ValueError("REPLAY_SOURCES is set but there is no replay to draw (it needs REPLAY_N >= 1 and "
                             "TATU_MODE=sft): it would change nothing")
        if self.train != "all" and self.seed_ckpt is None:
            raise ValueError(f"TATU_TRAIN={self.train} trains part of a model and needs TATU_SEED_CKPT "
                             "(a trunk from scratch trains every weight: TATU_TRAIN=all)")
        if self.min_lr > self.lr:
            raise ValueError(f"TATU_MIN_LR ({self.min_lr}) must not exceed TATU_LR ({self.lr})")
        if self.n_embd % self.n_head:
            raise ValueError(f"TATU_N_EMBD ({self.n_embd}) must be divisible by TATU_N_HEAD ({self.n_head})")
        check_retention(self)  # TATU_ANCHOR* / TATU_EWC_* / TATU_DISTILL*: daemon/retention/spec.py
        self.train_spec  # noqa: B018 -- every TATU_TRAIN / TATU_LORA_* problem is a 78 here, before anything loads
        return self

    # --- derived, never stored twice ---
    @property
    def run_dir(self) -> Path:
        return self.out / self.run

    @property
    def retention(self) -> RetentionConfig:
        """The retention terms' section, all the terms are given of it (with `retention_facts`)."""
        return RetentionConfig(**{name: getattr(self, name) for name in RetentionConfig.model_fields})

    @property
    def retention_facts(self) -> RunFacts:
        return RunFacts(seed_ckpt=self.seed_ckpt, run_dir=self.run_dir, data=self.data, micro_batch=self.micro_batch,
                        seq_len=self.seq_len, seed=self.seed, mix=self.mix, replay_sources=self.replay_sources)

    @property
    def replay_sources(self) -> ReplaySources | None:
        """REPLAY_SOURCES parsed (None: the replay micro-batches read the channel `replay`)."""
        return None if self.replay_sources_text is None else ReplaySources.parse(self.replay_sources_text)

    @property
    def mix(self) -> dict[str, int]:
        """Channel -> micro-batches per optimizer step, in the order they are drawn."""
        if self.mode == "pretrain":
            return {"pretrain": self.sft_ge}
        return {name: n for name, n in (("sft", self.sft_ge), ("replay", self.replay_n)) if n > 0}

    @property
    def train_spec(self) -> TrainSpec:
        """Which weights train (ValueError naming the variable when the settings contradict each other)."""
        try:
            mode, k = parse_train(self.train)
            lora_set = [f.alias for name, f in type(self).model_fields.items()
                        if name.startswith("lora_") and getattr(self, name) is not None]
            if mode != "lora" and lora_set:
                raise TrainSpecError(f"{lora_set[0]} is set but TATU_TRAIN={self.train}: adapters exist only with TATU_TRAIN=lora")
            if mode == "all" and self.train_embeddings is not None:
                raise TrainSpecError("TATU_TRAIN_EMBEDDINGS is set but TATU_TRAIN=all already trains every weight")
            lora = None
            if mode == "lora":
                rank = self.lora_rank or LoraSpec.rank
                lora = LoraSpec(rank=rank, alpha=self.lora_alpha if self.lora_alpha is not None else 2.0 * rank,
                                dropout=self.lora_dropout or 0.0,
                                targets=parse_targets(self.lora_targets) if self.lora_targets else LoraSpec.targets,
                                layers=check_layers(self.lora_layers) if self.lora_layers else "all")
        except TrainSpecError as exc:
            raise ValueError(str(exc)) from None
        return TrainSpec(mode=mode, top_k=k, embeddings=mode == "all" or bool(self.train_embeddings), lora=lora)

    def to_json(self) -> dict:
        return {type(self).model_fields[k].alias: v for k, v in json.loads(self.model_dump_json()).items()}

    @classmethod
    def defaults_json(cls) -> dict:
        """alias -> default of every setting that has one, as to_json writes it."""
        return {f.alias: json.loads(json.dumps(f.default, default=str)) for f in cls.model_fields.values()
                if not f.is_required()}

    @property
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:12]


def known_variables() -> list[str]:
    return [f.alias for f in RunConfig.model_fields.values()]


def check_unknown(environ: Mapping[str, str]) -> None:
    """A process environment's names (systemd's, the shell's, torchrun's pass too): one under tatu's
    prefixes that tatu does not know, or one an edit from a known name (SFTGE, sft_ge), is refused
    naming the nearest known name; any other name is another program's and passes."""
    known = known_variables()
    allowed = {*known, *PROCESS_VARIABLES}
    for name in sorted(environ):
        if name in allowed:
            continue
        meant = one_edit_from(name, known)
        if meant is None and name.startswith(PREFIXES):
            meant = nearest(name, known)
        elif meant is None:
            continue
        raise ConfigError(f"unknown variable {name}" + (f" (did you mean {meant}?)" if meant else ""))


def check_env_file(path: Path) -> None:
    """An env file holds tatu's variables only: a name that is not one is refused in one line
    naming the file, the line and the nearest known name (SFTGE -> SFT_GE, TATU_LRR -> TATU_LR)."""
    try:
        numbered = parse_env_file_lines(path)
    except EnvFileError as exc:
        raise ConfigError(str(exc)) from None
    known = known_variables()
    for name, (_, line) in sorted(numbered.items(), key=lambda item: item[1][1]):
        if name in known:
            continue
        if name.startswith(TORCHRUN_PREFIX):
            torchrun_names = torchrun_variables()
            if name in torchrun_names:
                continue
            meant = nearest(name, torchrun_names)
            raise ConfigError(f"{path}:{line}: {name} is not one of torchrun's options"
                              + (f" (did you mean {meant}?)" if meant else ""))
        if name in PROCESS_VARIABLES:
            raise ConfigError(f"{path}:{line}: {name} is the unit's to set (the file it names is this one), not a run variable")
        meant = nearest(name, known)
        if meant is not None:
            raise ConfigError(f"{path}:{line}: unknown variable {name} (did you mean {meant}?)")
        tatu_way = f"; the thread count is {_TATU_WAY[name]}" if name in _TATU_WAY else ""
        raise ConfigError(f"{path}:{line}: {name} is not a tatu variable: an env file holds tatu's variables only "
                          f"(another program's go in the process's environment: the shell's, or the unit's "
                          f"Environment=){tatu_way}")


def load_config(environ: Mapping[str, str] | None = None, **overrides) -> tuple[RunConfig, dict[str, str]]:
    """The process environment (or `environ`), then `overrides`: see `load_layers`."""
    return load_layers([("env", os.environ if environ is None else environ), ("override", overrides)])


Locate = Callable[[str, str], "str | None"]


def load_layers(layers: Sequence[tuple[str, Mapping[str, str]]],
                locate: Locate | None = None) -> tuple[RunConfig, dict[str, str]]:
    """(config, origins) from (label, variables) layers, later layers winning, or ConfigError in one line.

    origins says where each setting came from: a layer's label ('env', 'env-file', 'unit',
    'override', ...) or 'default'. An empty value unsets the variable (systemd's `VAR=`).
    `locate(variable, label)`: the FILE:LINE that set it, where one did (an env file), for the
    message of a bad value."""
    values: dict[str, str] = {}
    origins = {alias: "default" for alias in known_variables()}
    for label, layer in layers:
        check_unknown(layer)
        for alias in known_variables():
            if alias not in layer:
                continue
            value = str(layer[alias])
            if value.strip() == "":
                values.pop(alias, None)
                origins[alias] = "default"
            else:
                values[alias] = value
                origins[alias] = label
    try:
        config = RunConfig.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, origins, locate)) from None
    return config, origins


def _reason(err: dict) -> str:
    """pydantic's error as the operator's reason: what the value is not, and what is allowed."""
    ctx, kind = err.get("ctx") or {}, err["type"]
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "not a whole number"
    if kind in ("float_parsing", "float_type"):
        return "not a number"
    if kind in ("bool_parsing", "bool_type"):
        return "not 1 or 0 (true, false, yes, no)"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = {"greater_than_equal": ("at least", "ge"), "greater_than": ("above", "gt"),
                 "less_than_equal": ("at most", "le"), "less_than": ("below", "lt")}[kind]
        return f"must be {bound[0]} {ctx[bound[1]]}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind == "missing":
        return "is not set"
    if kind == "string_pattern_mismatch":
        return f"must be of the form {ctx.get('pattern')}"
    return err["msg"][:1].lower() + err["msg"][1:]


def _one_line(exc: ValidationError, origins: dict[str, str] | None = None, locate: Locate | None = None) -> str:
    """Every bad value as `[FILE:LINE: ]VAR=VALUE [origin]: reason (default: D)`; a problem of
    several variables together (the coherence checks) in its own words, which name them."""
    fields = {f.alias: f for f in RunConfig.model_fields.values()}
    problems = []
    for err in exc.errors():
        alias = str(err["loc"][0]) if err["loc"] else ""
        if alias not in fields:
            problems.append(_reason(err))
            continue
        if err["type"] == "missing":
            description = fields[alias].description
            problems.append(f"{alias} is not set" + (f": the {description}" if description else ""))
            continue
        label = (origins or {}).get(alias, "")
        at = locate(alias, label) if locate and label else None
        field = fields[alias]
        default = "" if field.is_required() or field.default is None else f" (default: {field.default})"
        problems.append(f"{at + ': ' if at else ''}{alias}={err.get('input')}{'' if at or not label else f' [{label}]'}: "
                        f"{_reason(err)}{default}")
    return "; ".join(problems)


# What an operator's name means that the name itself does not say, printed beside it.
_PRINTED_NOTES = {
    "EVAL_BATCH": "ruler lines per EVAL_EN_BATCHES (EVAL_EN_ALL=0), not a batch size",
}


def describe(config: RunConfig, origins: dict[str, str]) -> list[str]:
    """The effective configuration, one line per field with where it came from."""
    notes = dict(_PRINTED_NOTES)
    spec = config.train_spec
    if not spec.full:
        notes["TATU_TRAIN_EMBEDDINGS"] = ("wte and wpe train; the head is tied to wte, so it moves too" if spec.embeddings
                                          else "wte and wpe frozen; the head is tied to wte, so it is frozen too")
    if spec.lora is not None:
        notes["TATU_TRAIN"] = f"{spec.describe()}, dropout {spec.lora.dropout:g}"
    if config.mode == "pretrain":
        notes["SFT_GE"] = "pretraining micro-batches per step (TATU_MODE=pretrain)"
    lines = []
    for name, field in type(config).model_fields.items():
        value = getattr(config, name)
        note = f"  {notes[field.alias]}" if field.alias in notes else ""
        lines.append(f"  {field.alias:<22} = {value!s:<24} [{origins.get(field.alias, 'default')}]{note}")
    return lines

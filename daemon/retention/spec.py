"""The retention terms' section of the run's configuration and its checks (pure Python + pydantic, no
torch: a bad value exits 78 at once).

`RetentionConfig` declares the terms' variables (TATU_ANCHOR*, TATU_EWC_*, TATU_DISTILL*); RunConfig
(daemon/config.py) composes it with the run's other variables into one flat set of variables and
hands the terms only this section (`RunConfig.retention`) and `RunFacts`, what they need of the run
beyond it. Nothing in this package imports daemon/config.py.

Each TATU_ANCHOR_WEIGHT / TATU_EWC_* / TATU_DISTILL_* variable is set only with its switch on (a
value that would change nothing is refused, as TATU_LORA_* without TATU_TRAIN=lora), the weight is
required when the switch is on, and the combinations that cannot mean anything are refused with
their reason. `check_retention` is called by RunConfig's validator; raises ValueError.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tatu.data.replay import ReplaySources


class RetentionConfig(BaseModel):
    """The retention terms' variables: stay near the seed checkpoint (TATU_ANCHOR), distill it (TATU_DISTILL)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    anchor: Literal["none", "l2sp", "ewc"] = Field("none", alias="TATU_ANCHOR",
                                                   description="penalty on the distance to the seed's weights")
    anchor_weight: float | None = Field(None, alias="TATU_ANCHOR_WEIGHT", gt=0, le=1e12,
                                        description="lambda of the anchor (required when TATU_ANCHOR is not none)")
    ewc_batches: int = Field(32, alias="TATU_EWC_BATCHES", ge=1, le=1_000_000,
                             description="replay micro-batches the seed's Fisher is estimated on (TATU_ANCHOR=ewc)")
    ewc_fisher: Literal["true", "empirical"] = Field("true", alias="TATU_EWC_FISHER",
                                                     description="Fisher labels: sampled from the seed (true) or the data's")
    distill: bool = Field(False, alias="TATU_DISTILL", description="distill the seed's predictions (LwF)")
    distill_weight: float | None = Field(None, alias="TATU_DISTILL_WEIGHT", gt=0, le=1e6,
                                         description="alpha of the distillation term (required when TATU_DISTILL=1)")
    distill_t: float = Field(2.0, alias="TATU_DISTILL_T", gt=0, le=1e3, description="distillation temperature")
    distill_on: Literal["replay", "sft", "both"] = Field("replay", alias="TATU_DISTILL_ON",
                                                         description="the micro-batches the distillation term is on")

    @property
    def on(self) -> bool:
        """A term runs: TATU_ANCHOR is not none or TATU_DISTILL=1."""
        return self.anchor != "none" or self.distill


@dataclass(frozen=True)
class RunFacts:
    """What the terms need of the run beyond their own section."""
    seed_ckpt: Path | None  # the seed, read again on a restart (the resume state holds the trained weights)
    run_dir: Path  # where EWC's Fisher file is
    data: Path  # EWC's replay micro-batches: data dir, shape, seed
    micro_batch: int
    seq_len: int
    seed: int
    mix: dict[str, int]  # channel -> micro-batches per step (what distillation costs per step)
    replay_sources: ReplaySources | None = None  # EWC's replay micro-batches come from these (None: channel replay)


def check_retention(config) -> None:
    """TATU_ANCHOR_* / TATU_EWC_* / TATU_DISTILL_*: each set only with its switch on, the weight then required."""
    anchor_vars = {"anchor_weight": config.anchor != "none", "ewc_batches": config.anchor == "ewc",
                   "ewc_fisher": config.anchor == "ewc"}
    distill_vars = {name: config.distill for name in ("distill_weight", "distill_t", "distill_on")}
    for name, on in {**anchor_vars, **distill_vars}.items():
        if name in config.model_fields_set and not on:
            switch = "TATU_ANCHOR=ewc" if name.startswith("ewc_") else (
                "TATU_ANCHOR" if name.startswith("anchor") else "TATU_DISTILL=1")
            raise ValueError(f"{type(config).model_fields[name].alias} is set but {switch} is not: it would change nothing")
    if config.anchor != "none" and config.anchor_weight is None:
        raise ValueError(f"TATU_ANCHOR={config.anchor} needs TATU_ANCHOR_WEIGHT (lambda > 0)")
    if config.distill and config.distill_weight is None:
        raise ValueError("TATU_DISTILL=1 needs TATU_DISTILL_WEIGHT (alpha > 0)")
    if (config.anchor != "none" or config.distill) and config.mode != "sft":
        raise ValueError("TATU_ANCHOR and TATU_DISTILL need TATU_MODE=sft (a seed to stay near or distill)")
    if config.anchor != "none" and config.train == "lora":
        raise ValueError(f"TATU_ANCHOR={config.anchor} with TATU_TRAIN=lora: the seed's weights are frozen and "
                         "the adapters start at a zero update, so a penalty on the adapters' factors is not "
                         "the distance to the seed; tatu does not anchor the merged update (use TATU_TRAIN=all or top:K)")
    if config.distill:
        need = {"replay": ("REPLAY_N", config.replay_n), "sft": ("SFT_GE", config.sft_ge)}
        for channel in ("replay", "sft"):
            name, count = need[channel]
            if config.distill_on == channel and count == 0:
                raise ValueError(f"TATU_DISTILL_ON={channel} but {name}=0: no micro-batch to distill on")

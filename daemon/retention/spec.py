"""The retention terms' variables, checked together (pure Python, no torch: a bad value exits 78 at once).

Each TATU_ANCHOR_WEIGHT / TATU_EWC_* / TATU_DISTILL_* variable is set only with its switch on (a
value that would change nothing is refused, as TATU_LORA_* without TATU_TRAIN=lora), the weight is
required when the switch is on, and the combinations that cannot mean anything are refused with
their reason. Called by RunConfig's validator (daemon/config.py); raises ValueError.
"""
from __future__ import annotations


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

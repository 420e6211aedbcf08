"""Which weights of a GPT train: the parsed form of TATU_TRAIN and the TATU_LORA_* settings.

Pure Python (no torch), so the daemon's configuration can check these values and exit 78 before
anything heavy loads. model/adapters.py applies a TrainSpec to a model.

    all        every weight trains (the default)
    top:K      the last K blocks and ln_f train; everything else is frozen
    lora       every base weight is frozen; rank-r adapters train on the named Linear modules

Embeddings (wte, wpe): the head is tied to wte, so training "the head" also moves the input
embedding; outside `all` both stay frozen unless `embeddings` is set.
"""
from __future__ import annotations

from dataclasses import dataclass

# The Linear modules of a block an adapter may sit on (GPT-2's names).
LORA_TARGETS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
MODES = ("all", "top", "lora")


class TrainSpecError(ValueError):
    """A value that cannot describe which weights train; the message names the variable."""


@dataclass(frozen=True)
class LoraSpec:
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = LORA_TARGETS
    layers: str = "all"  # "all", "top:K" or a comma list of block indices

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def blocks(self, n_layer: int) -> list[int]:
        """The block indices that get adapters, or TrainSpecError naming TATU_LORA_LAYERS."""
        if self.layers == "all":
            return list(range(n_layer))
        if self.layers.startswith("top:"):
            return list(range(n_layer - _top_k(self.layers, n_layer, "TATU_LORA_LAYERS"), n_layer))
        blocks = sorted(set(parse_layer_list(self.layers)))
        bad = [b for b in blocks if b >= n_layer]
        if bad:
            raise TrainSpecError(f"TATU_LORA_LAYERS={self.layers}: block {bad[0]} does not exist "
                                 f"(the model's n_layer is {n_layer}: blocks 0..{n_layer - 1})")
        return blocks


@dataclass(frozen=True)
class TrainSpec:
    mode: str = "all"  # one of MODES
    top_k: int = 0  # mode "top": how many of the last blocks train
    embeddings: bool = False  # outside "all": wte (tied to the head) and wpe train too
    lora: LoraSpec | None = None  # mode "lora"

    @property
    def full(self) -> bool:
        return self.mode == "all"

    def check_model(self, n_layer: int) -> None:
        """The checks that need the model's depth: K and the LoRA blocks fit it (TrainSpecError)."""
        if self.mode == "top":
            _top_k(f"top:{self.top_k}", n_layer, "TATU_TRAIN")
        if self.lora is not None:
            self.lora.blocks(n_layer)

    def describe(self) -> str:
        """The setting as TATU_TRAIN spells it, plus what it implies."""
        if self.mode == "all":
            return "all"
        if self.mode == "top":
            return f"top:{self.top_k}"
        lora = self.lora
        return f"lora r={lora.rank} alpha={lora.alpha:g} on {','.join(lora.targets)} in blocks {lora.layers}"


def parse_train(value: str) -> tuple[str, int]:
    """TATU_TRAIN -> (mode, K); the depth check comes later (TrainSpec.check_model)."""
    value = value.strip()
    if value in ("all", "lora"):
        return value, 0
    if value.startswith("top:"):
        return "top", _positive_k(value, "TATU_TRAIN")
    raise TrainSpecError(f"TATU_TRAIN={value!r}: expected all, top:K (K >= 1) or lora")


def parse_targets(value: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in value.split(",") if t.strip())
    unknown = [t for t in names if t not in LORA_TARGETS]
    if unknown or not names:
        raise TrainSpecError(f"TATU_LORA_TARGETS={value!r}: unknown target {unknown[0] if unknown else '(none)'!r}; "
                             f"choose from {','.join(LORA_TARGETS)}")
    if len(set(names)) != len(names):
        raise TrainSpecError(f"TATU_LORA_TARGETS={value!r}: a target is named twice")
    return names


def check_layers(value: str) -> str:
    """TATU_LORA_LAYERS: all, top:K or block indices like 0,2,5 (the depth check comes later)."""
    value = value.strip()
    if value == "all":
        return value
    if value.startswith("top:"):
        _positive_k(value, "TATU_LORA_LAYERS")
        return value
    parse_layer_list(value)
    return value


def parse_layer_list(value: str) -> list[int]:
    try:
        blocks = [int(part) for part in value.split(",")]
    except ValueError:
        raise TrainSpecError(f"TATU_LORA_LAYERS={value!r}: expected all, top:K or block indices like 0,2,5") from None
    if any(b < 0 for b in blocks):
        raise TrainSpecError(f"TATU_LORA_LAYERS={value!r}: block indices start at 0")
    return blocks


def _positive_k(value: str, variable: str) -> int:
    try:
        k = int(value.removeprefix("top:"))
    except ValueError:
        raise TrainSpecError(f"{variable}={value!r}: K in top:K must be an integer") from None
    if k < 1:
        raise TrainSpecError(f"{variable}={value!r}: K must be at least 1 (top:0 would train nothing)")
    return k


def _top_k(value: str, n_layer: int, variable: str) -> int:
    k = _positive_k(value, variable)
    if k > n_layer:
        raise TrainSpecError(f"{variable}={value}: K is above the model's n_layer {n_layer}")
    return k

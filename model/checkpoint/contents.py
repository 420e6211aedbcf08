"""What a loaded checkpoint holds, whatever its format, and the checks every format's reader
makes before it hands one out: a config that fits tatu's GPT, a usable tokenizer, the two
trained together, weights that fit the config. Each failure is a CheckpointError (exit 65)
naming the file and what is wrong with it."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch

from tatu.model.adapters import is_adapter_key, merge_state
from tatu.model.checkpoint.files import CheckpointError
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import Tokenizer
from tatu.model.tokenizer_json import tokenizer_from_dict

TIED_KEYS = ("lm_head.weight",)


class DirectoryFormat(NamedTuple):
    """Another directory format a loader is handed (tatu.model.hf.GPT2_DIRECTORY): checked
    before tatu's own, so the checkpoint package never imports the formats it can be handed."""
    recognises: Callable[[Path], bool]
    load: Callable[[Path], "Checkpoint"]


@dataclass
class Checkpoint:
    path: Path
    model_config: GPTConfig
    model_state: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    meta: dict = field(default_factory=dict)
    extra_tensors: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    extra_json: dict[str, Any] = field(default_factory=dict)

    def build_model(self, device: str | torch.device = "cpu") -> GPT:
        """A plain GPT with these weights; a LoRA run's resume state (base + adapters) merged."""
        model = GPT(GPTConfig(**self.model_config.to_dict()))
        load_model_state(model, self.plain_state(), str(self.path))
        return model.to(device)

    def plain_state(self) -> dict[str, torch.Tensor]:
        if not any(is_adapter_key(k) for k in self.model_state):
            return self.model_state
        adapter = self.meta.get("adapter")
        if not isinstance(adapter, dict) or not isinstance(adapter.get("scaling"), (int, float)):
            raise CheckpointError(f"{self.path}: holds LoRA adapters but meta.json does not say their scaling")
        return merge_state(self.model_state, float(adapter["scaling"]))


def model_state_for_saving(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if k not in TIED_KEYS}


def load_model_state(model: GPT, state: dict[str, torch.Tensor], source: str) -> None:
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # torch reports tensors of the wrong shape ("size mismatch") this way
        raise CheckpointError(f"{source}: weights do not fit the model config ({_first_lines(exc)})") from exc
    missing = set(result.missing_keys) - set(TIED_KEYS)
    if missing or result.unexpected_keys:
        raise CheckpointError(
            f"{source}: weights do not fit the model config (missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(result.unexpected_keys)[:5]})"
        )


def _first_lines(exc: BaseException, n: int = 3) -> str:
    """torch's load_state_dict error spans one line per bad tensor; the first few name the problem."""
    return " ".join(str(exc).strip().splitlines()[:n])


def parse_tokenizer(payload: Any, source: str) -> Tokenizer:
    if not isinstance(payload, dict):
        raise CheckpointError(f"{source}: tokenizer must be a JSON object, found {type(payload).__name__}")
    try:
        return tokenizer_from_dict(payload, source)
    except KeyError as exc:
        raise CheckpointError(f"{source}: tokenizer lacks the field {exc}") from exc
    except Exception as exc:  # TokenizerError, and HF tokenizers' own plain Exception on a bad "hf" body
        raise CheckpointError(f"{source}: unusable tokenizer ({exc})") from exc


def parse_config(payload: Any, source: str) -> GPTConfig:
    if not isinstance(payload, dict):
        raise CheckpointError(f"{source}: model config must be a JSON object, found {type(payload).__name__}")
    try:
        return GPTConfig.from_dict(dict(payload))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{source}: model config does not fit tatu's GPT ({exc})") from exc


def check_vocab(tokenizer: Tokenizer, config: GPTConfig, source: str) -> None:
    # Ids past the embedding would crash mid-run; ids never produced would make every score wrong.
    if tokenizer.vocab_size != config.vocab_size:
        raise CheckpointError(
            f"{source}: tokenizer has {tokenizer.vocab_size} tokens but the model config has "
            f"vocab_size {config.vocab_size}: they were not trained together"
        )

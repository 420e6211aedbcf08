"""tatu <-> transformers' GPT-2 format, without importing transformers.

    <dir>/model.safetensors        GPT2LMHeadModel weights ("transformer.*", lm_head tied, not stored)
    <dir>/config.json              GPT2Config (model_type gpt2)
    <dir>/generation_config.json   the BOS/EOS/PAD ids
    <dir>/tokenizer.json           a `tokenizers` model with tatu's ids and specials
    <dir>/tokenizer_config.json    PreTrainedTokenizerFast with tatu's BOS/EOS/PAD
    <dir>/special_tokens_map.json
    <dir>/tatu_meta.json           the checkpoint's own metadata (trunk reference, step, ...)

The weights are a renaming plus one transposition: transformers stores c_attn, c_proj and c_fc
as Conv1D, whose weight is (in, out), the transpose of nn.Linear's (out, in). Only what GPT-2's
layout expresses exactly is exported; anything else (a model without biases) is refused, never
approximated. The same rules read a GPT-2 directory made elsewhere as a tatu checkpoint:
GPT2_DIRECTORY is the reader `load_checkpoint` is handed (this module imports the checkpoint
format, never the other way round), and `load_checkpoint_or_gpt2` is what TATU_SEED_CKPT,
`tatu eval` and the sweep's scores read with. The tokenizer.json conversion is
tatu.model.tokenizer_json's.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load as st_load, save as st_save

from tatu.atomic import atomic_directory
from tatu.model.checkpoint import TIED_KEYS, Checkpoint, CheckpointError, DirectoryFormat, load_checkpoint
from tatu.model.gpt import GPTConfig
from tatu.model.tokenizer import Tokenizer, TokenizerError
from tatu.model.tokenizer_json import HFTokenizerError, tokenizer_from_hf, tokenizer_to_hf

# Conv1D weights in transformers' GPT-2: stored transposed relative to nn.Linear
_CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# causal-mask buffers older transformers wrote into GPT-2 checkpoints: not weights
_BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias")
LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, what tatu's GPT uses
# both are the tanh approximation tatu's MLP uses; gelu_pytorch_tanh is the very same kernel
_TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh")
EXPORT_ACTIVATION = "gelu_pytorch_tanh"


class HFFormatError(CheckpointError, HFTokenizerError):
    """A model or tokenizer that one side's format cannot express exactly."""


# ---- weights ---------------------------------------------------------------------------------

def _is_conv1d(name: str) -> bool:
    return name.endswith(_CONV1D_SUFFIXES)


def state_to_hf(model_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """tatu state dict (lm_head tied, absent) -> GPT2LMHeadModel's safetensors keys."""
    out = {}
    for name, tensor in model_state.items():
        if name in TIED_KEYS:
            continue
        if not name.startswith("transformer."):
            raise HFFormatError(f"weight {name!r} has no place in GPT-2's layout")
        out[name] = (tensor.t() if _is_conv1d(name) else tensor).contiguous()
    return out


def state_from_hf(hf_state: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel weights (with or without the "transformer." prefix) -> tatu's state dict."""
    out = {}
    lm_head = None
    for name, tensor in hf_state.items():
        if name == "lm_head.weight":
            lm_head = tensor
            continue
        if name.endswith(_BUFFER_SUFFIXES):
            continue
        if not name.startswith("transformer."):
            name = "transformer." + name
        out[name] = (tensor.t() if _is_conv1d(name) else tensor).contiguous()
    if lm_head is not None and not torch.equal(lm_head, out.get("transformer.wte.weight", lm_head)):
        raise HFFormatError(f"{source}: lm_head.weight differs from wte: tatu's GPT ties them (untied heads are not supported)")
    return out


# ---- config ----------------------------------------------------------------------------------

def config_to_hf(config: GPTConfig, tokenizer: Tokenizer) -> dict:
    if not config.bias:
        raise HFFormatError("model config bias=False: GPT-2's layout always has biases in its linear layers and "
                            "layer norms, so this model cannot be exported exactly")
    if config.vocab_size != tokenizer.vocab_size:
        raise HFFormatError(f"model vocab_size {config.vocab_size} != tokenizer's {tokenizer.vocab_size}")
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.block_size,
        "n_ctx": config.block_size,
        "n_embd": config.n_embd,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "n_inner": None,
        "activation_function": EXPORT_ACTIVATION,
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "layer_norm_epsilon": LAYER_NORM_EPS,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "add_cross_attention": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "bos_token_id": tokenizer.bos_id,
        "eos_token_id": tokenizer.eos_id,
        "pad_token_id": tokenizer.pad_id,
        "dtype": "float32",
    }


def config_from_hf(payload: dict, source: str) -> GPTConfig:
    """A GPT2Config's JSON -> GPTConfig, refusing every setting tatu's GPT would compute differently."""
    if payload.get("model_type") != "gpt2":
        raise HFFormatError(f"{source}: model_type {payload.get('model_type')!r}, only 'gpt2' is supported")

    def need(key, ok, why):
        if key in payload and not ok(payload[key]):
            raise HFFormatError(f"{source}: {key}={payload[key]!r} is not supported ({why})")

    need("activation_function", lambda v: v in _TANH_GELUS, "tatu's MLP uses the tanh GELU: gelu_new or gelu_pytorch_tanh")
    need("layer_norm_epsilon", lambda v: v == LAYER_NORM_EPS, f"tatu's layer norms use eps {LAYER_NORM_EPS}")
    need("n_inner", lambda v: v is None or v == 4 * payload.get("n_embd", 768), "tatu's MLP is 4 x n_embd wide")
    need("scale_attn_weights", lambda v: v is True, "tatu scales attention by 1/sqrt(head_dim)")
    need("scale_attn_by_inverse_layer_idx", lambda v: v is False, "tatu does not scale attention per layer")
    need("add_cross_attention", lambda v: v is False, "tatu's GPT has no cross-attention")
    need("tie_word_embeddings", lambda v: v is True, "tatu's lm_head is tied to wte")
    need("n_ctx", lambda v: v == payload.get("n_positions", v), "n_ctx must equal n_positions")
    drops = {k: payload.get(k, 0.1) for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")}
    if len(set(drops.values())) != 1:
        raise HFFormatError(f"{source}: dropouts {drops} differ; tatu's GPT has one dropout for all three")
    try:
        return GPTConfig(
            vocab_size=int(payload["vocab_size"]),
            block_size=int(payload.get("n_positions", 1024)),
            n_layer=int(payload.get("n_layer", 12)),
            n_head=int(payload.get("n_head", 12)),
            n_embd=int(payload.get("n_embd", 768)),
            dropout=float(drops["resid_pdrop"]),
            bias=True,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise HFFormatError(f"{source}: not a usable GPT-2 config ({exc})") from None


# ---- tokenizer_config.json ---------------------------------------------------------------

def tokenizer_config(tokenizer: Tokenizer, block_size: int) -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|bos|>",
        "eos_token": "<|eos|>",
        "pad_token": "<|pad|>",
        "additional_special_tokens": ["<|user|>", "<|assistant|>"],
        "model_max_length": block_size,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        # tatu never makes a special token out of text: "<|bos|>" typed in a line is text
        "split_special_tokens": True,
    }


# ---- directories -----------------------------------------------------------------------------

def _json_bytes(payload) -> bytes:
    return (json.dumps(payload, indent=1, ensure_ascii=False, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def export_hf(ckpt: Checkpoint, out: str | Path) -> Path:
    """Write `ckpt` as a transformers GPT-2 directory; the directory appears complete or not at all."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out}: already exists; give a new directory")
    tok = ckpt.tokenizer
    cfg = ckpt.model_config
    documents = {
        "config.json": _json_bytes(config_to_hf(cfg, tok)),
        "generation_config.json": _json_bytes({"bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id,
                                               "pad_token_id": tok.pad_id}),
        "model.safetensors": st_save(state_to_hf(ckpt.plain_state()), metadata={"format": "pt"}),
        "tokenizer.json": _json_bytes(tokenizer_to_hf(tok)),
        "tokenizer_config.json": _json_bytes(tokenizer_config(tok, cfg.block_size)),
        "special_tokens_map.json": _json_bytes({"bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>",
                                                "additional_special_tokens": ["<|user|>", "<|assistant|>"]}),
        "tatu_meta.json": _json_bytes(ckpt.meta),
    }
    with atomic_directory(out, documents):
        pass
    return out


def is_hf_dir(path: str | Path) -> bool:
    """A transformers GPT-2 directory (and not a tatu checkpoint, which has a manifest)."""
    path = Path(path)
    if not path.is_dir() or (path / "manifest.json").exists():
        return False
    try:
        return json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type") == "gpt2"
    except (OSError, ValueError, AttributeError):
        return False


def _read_json(file: Path):
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HFFormatError(f"{file}: missing or not JSON ({exc})") from None


def load_hf_dir(path: str | Path) -> Checkpoint:
    """A transformers GPT-2 directory as a tatu Checkpoint (weights, config, tokenizer, meta)."""
    path = Path(path)
    config = config_from_hf(_read_json(path / "config.json"), str(path / "config.json"))
    try:
        tokenizer = tokenizer_from_hf(_read_json(path / "tokenizer.json"), str(path / "tokenizer.json"))
    except TokenizerError as exc:  # a checkpoint that cannot be read: the loader's error (exit 65)
        raise HFFormatError(str(exc)) from None
    if tokenizer.vocab_size != config.vocab_size:
        raise HFFormatError(f"{path}: tokenizer has {tokenizer.vocab_size} tokens but config.json has vocab_size "
                            f"{config.vocab_size}; tatu needs them equal")
    weights = path / "model.safetensors"
    try:
        hf_state = st_load(weights.read_bytes())
    except OSError as exc:
        raise HFFormatError(f"{weights}: missing or unreadable ({exc.strerror}); tatu reads safetensors weights "
                            "only (not pytorch_model.bin, a pickle): save with safe_serialization=True") from None
    except Exception as exc:  # safetensors' own error types
        raise HFFormatError(f"{weights}: unreadable safetensors ({exc})") from None
    meta_file = path / "tatu_meta.json"
    meta = _read_json(meta_file) if meta_file.exists() else {"source": "transformers", "path": str(path)}
    return Checkpoint(path=path, model_config=config, model_state=state_from_hf(hf_state, str(weights)),
                      tokenizer=tokenizer, meta=meta)


GPT2_DIRECTORY = DirectoryFormat(recognises=is_hf_dir, load=load_hf_dir)


def load_checkpoint_or_gpt2(path: str | Path, map_location: str = "cpu") -> Checkpoint:
    """A tatu checkpoint (directory or legacy .pt) or a transformers GPT-2 directory."""
    return load_checkpoint(path, map_location, formats=(GPT2_DIRECTORY,))

"""The GPT: GPT-2's layout (learned positions, pre-LN blocks, GELU MLP, tied embeddings).

Parameter names follow GPT-2 (wte, wpe, h.N.ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
mlp.c_proj, ln_f), so an export to transformers' GPT2LMHeadModel is a renaming plus one
transposition: transformers builds c_attn, c_proj and c_fc as Conv1D, which stores its weight
as (in_features, out_features), the transpose of nn.Linear's (out_features, in_features); those
.weight tensors (not the biases) must be transposed on export.

`forward(idx, targets)` returns (logits, nll) with nll the per-token negative log-likelihood
(0 where the target is IGNORE_INDEX). The training loss and every evaluator reduce that one
tensor themselves, so there is a single code path from logits to a number.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE_INDEX = -100


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int = 256
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.0
    bias: bool = True
    attn: str = "sdpa"  # "manual" exists only for the benchmark and the equivalence test

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.attn not in ("sdpa", "manual"):
            raise ValueError(f"attn must be 'sdpa' or 'manual', not {self.attn!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, payload: dict) -> "GPTConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(payload) - known
        if unknown:
            raise ValueError(f"model config: unknown fields {sorted(unknown)}")
        return cls(**payload)


class KVCache:
    """Per-layer key/value buffers for incremental decoding (the key padding mask is not kept
    here: generate passes it to every forward as attn_mask)."""

    def __init__(self, n_layer: int, batch: int, n_head: int, max_len: int, head_dim: int, device, dtype):
        shape = (batch, n_head, max_len, head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.length = 0


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.manual = config.attn == "manual"
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x, attn_mask=None, cache: KVCache | None = None, layer: int = 0):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hd = C // self.n_head
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        if cache is not None:
            start = cache.length
            if attn_mask is None and start > 0 and T > 1:
                # is_causal aligns its mask top-left, which is wrong once cached keys precede q.
                raise ValueError("several new tokens after a filled KV cache need an explicit attn_mask")
            cache.k[layer][:, :, start : start + T] = k
            cache.v[layer][:, :, start : start + T] = v
            k = cache.k[layer][:, :, : start + T]
            v = cache.v[layer][:, :, : start + T]
        is_causal = attn_mask is None
        dropout_p = self.dropout if self.training else 0.0
        if self.manual:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            if attn_mask is None:
                attn_mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~attn_mask, float("-inf"))
            att = F.dropout(F.softmax(att, dim=-1), p=dropout_p, training=self.training)
            y = att @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, attn_mask=None, cache=None, layer=0):
        x = x + self.attn(self.ln_1(x), attn_mask, cache, layer)
        return x + self.mlp(self.ln_2(x))


def _check_prompts(prompts: list[list[int]], max_new_tokens: int, block_size: int) -> None:
    if max_new_tokens < 1:
        raise ValueError(f"generate: max_new_tokens must be >= 1, not {max_new_tokens}")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate: every prompt needs at least one token")
    for row, p in enumerate(prompts):
        if len(p) >= block_size:
            raise ValueError(
                f"generate: prompt {row} has {len(p)} tokens, block_size {block_size} leaves no room for new tokens"
            )


def _left_padded(prompts: list[list[int]], width: int, device) -> torch.Tensor:
    idx = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
    for row, p in enumerate(prompts):
        idx[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
    return idx


def _take(token: torch.Tensor, out: list[list[int]], done: list[bool], budgets: list[int], eos_id: int | None) -> None:
    """One sampled token per row: kept, or the row ends (EOS, or its budget is full)."""
    for row in range(len(out)):
        if done[row]:
            continue
        t = int(token[row])
        if eos_id is not None and t == eos_id:
            done[row] = True
        else:
            out[row].append(t)
            done[row] = len(out[row]) == budgets[row]


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in GPT-2
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def set_attention(self, kind: str) -> None:
        """Switch between the fused (sdpa) and the manual attention path in place."""
        self.config.attn = kind
        for block in self.transformer.h:
            block.attn.manual = kind == "manual"

    def forward(self, idx, targets=None, positions=None, attn_mask=None, cache: KVCache | None = None):
        B, T = idx.shape
        if positions is None:
            start = cache.length if cache is not None else 0
            if start + T > self.config.block_size:
                raise ValueError(f"sequence of {start + T} tokens exceeds block_size {self.config.block_size}")
            positions = torch.arange(start, start + T, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(positions))
        for layer, block in enumerate(self.transformer.h):
            x = block(x, attn_mask, cache, layer)
        if cache is not None:
            cache.length += T
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        nll = F.cross_entropy(
            logits.float().view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="none"
        ).view(B, T)
        return logits, nll

    @torch.inference_mode()
    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int | None = None,
        eos_id: int | None = None,
        generator: torch.Generator | None = None,
    ) -> list[list[int]]:
        """Continue each prompt; returns only the new tokens of each row, EOS excluded.

        Prompts of different lengths are left-padded into one batch; each row gets its own
        positions (starting at 0 at its first real token), its own budget of
        min(max_new_tokens, block_size - len(prompt)) new tokens, and padded keys are masked
        out, so a row's output equals generating it alone. Raises ValueError for an empty
        prompt, a prompt that leaves no room in block_size, or max_new_tokens < 1.
        """
        block_size = self.config.block_size
        _check_prompts(prompts, max_new_tokens, block_size)
        device = self.transformer.wte.weight.device
        B = len(prompts)
        prompt_lens = torch.tensor([len(p) for p in prompts], device=device)
        budgets = [min(max_new_tokens, block_size - len(p)) for p in prompts]
        max_prompt = int(prompt_lens.max())
        pad = max_prompt - prompt_lens
        idx = _left_padded(prompts, max_prompt, device)
        # The cache is indexed by batch step, not by position: rows that start later (short
        # prompts) may run past block_size columns while their own positions stay below it.
        total = max_prompt + max(budgets)
        key_real = torch.arange(total, device=device)[None, :] >= pad[:, None]  # (B, total)
        cfg = self.config
        dtype = self.transformer.wte.weight.dtype
        cache = KVCache(cfg.n_layer, B, cfg.n_head, total, cfg.n_embd // cfg.n_head, device, dtype)

        # Prefill: causal within the prompt, padded keys hidden; a padded query sees itself
        # only, so its softmax stays finite (its output is never used).
        pos = torch.arange(max_prompt, device=device)
        causal = pos[None, :] <= pos[:, None]
        mask = causal[None] & key_real[:, None, :max_prompt]
        mask = mask | torch.eye(max_prompt, dtype=torch.bool, device=device)[None]
        positions = (pos[None, :] - pad[:, None]).clamp(min=0)
        logits, _ = self(idx, positions=positions, attn_mask=mask[:, None], cache=cache)
        next_logits = logits[:, -1, :]

        out = [[] for _ in range(B)]
        done = [False] * B
        while True:
            token = self._sample(next_logits, temperature, top_k, generator)
            _take(token, out, done, budgets, eos_id)
            if all(done):
                break
            cur = cache.length
            # A finished row keeps stepping with the batch; its output is ignored, and clamping
            # keeps its position a valid index into wpe.
            positions = (cur - pad).clamp(max=block_size - 1)[:, None]
            mask = key_real[:, None, None, : cur + 1]
            logits, _ = self(token[:, None], positions=positions, attn_mask=mask, cache=cache)
            next_logits = logits[:, -1, :]
        return out

    @staticmethod
    def _sample(logits, temperature, top_k, generator):
        if temperature <= 0:
            return logits.argmax(dim=-1)
        logits = logits.float() / temperature
        if top_k is not None:
            kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = F.softmax(logits, dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

"""model/adapters.py: which weights train, counted against the shapes; LoRA at init is the seed;
merged weights compute what the adapters do."""
from __future__ import annotations

import torch

from tatu.model.adapters import LoRALinear, apply_train_spec, lora_modules, merge_state, trainable_summary
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.train_spec import LoraSpec, TrainSpec


def tiny_gpt(n_layer=3, seed=0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=n_layer, n_head=2, n_embd=16))


# --- what trains -------------------------------------------------------------------------------

def naive_counts(model: GPT, trained_prefixes: list[str]) -> int:
    """Parameters under the given name prefixes, counted from the state dict (the tied head once)."""
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    return sum(v.numel() for k, v in state.items() if any(k.startswith(p) for p in trained_prefixes))


def test_top_k_trains_the_last_blocks_and_ln_f_only():
    model = tiny_gpt(n_layer=3)
    apply_train_spec(model, TrainSpec(mode="top", top_k=2))
    summary = trainable_summary(model, TrainSpec(mode="top", top_k=2))
    expected = naive_counts(model, ["transformer.h.1.", "transformer.h.2.", "transformer.ln_f."])
    assert summary["trainable"] == expected
    assert summary["base"] == naive_counts(model, [""])
    assert summary["line"].endswith(": h.1-2, ln_f") and f"({100 * expected / summary['base']:.1f}%)" in summary["line"]
    assert not model.transformer.wte.weight.requires_grad and not model.lm_head.weight.requires_grad


def test_top_k_with_embeddings_moves_the_tied_head():
    model = tiny_gpt(n_layer=3)
    spec = TrainSpec(mode="top", top_k=1, embeddings=True)
    apply_train_spec(model, spec)
    assert model.lm_head.weight.requires_grad  # tied to wte: training the input side trains the head
    assert trainable_summary(model, spec)["line"].endswith(": h.2, ln_f, wte (tied head), wpe")


def test_lora_counts_match_the_shapes():
    model = tiny_gpt(n_layer=3)
    spec = TrainSpec(mode="lora", lora=LoraSpec(rank=4, alpha=8.0, layers="top:2"))
    apply_train_spec(model, spec)
    d, r = 16, 4
    # c_attn d->3d, attn.c_proj d->d, c_fc d->4d, mlp.c_proj 4d->d: A is r x in, B is out x r
    per_block = r * (d + 3 * d) + r * (d + d) + r * (d + 4 * d) + r * (4 * d + d)
    summary = trainable_summary(model, spec)
    assert summary["trainable"] == 2 * per_block and summary["lora_modules"] == 8
    assert summary["line"].startswith("lora r=4 alpha=8 on 8 modules: ")
    assert isinstance(model.transformer.h[0].attn.c_attn, torch.nn.Linear)
    assert not isinstance(model.transformer.h[0].attn.c_attn, LoRALinear)
    assert isinstance(model.transformer.h[2].mlp.c_proj, LoRALinear)


def test_lora_at_init_equals_the_seed_and_merged_equals_unmerged():
    model = tiny_gpt(n_layer=2)
    idx = torch.randint(0, 50, (3, 16))
    seed_logits, _ = model(idx)
    apply_train_spec(model, TrainSpec(mode="lora", lora=LoraSpec(rank=4, alpha=8.0)))
    logits, _ = model(idx)
    assert torch.equal(logits, seed_logits)  # B = 0: step 0 is the seed exactly
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoRALinear):
                module.lora_B.normal_(0, 0.05)
    unmerged, _ = model(idx)
    assert (unmerged - seed_logits).abs().max() > 1e-3  # the adapters do change the output
    plain = tiny_gpt(n_layer=2, seed=99)
    scaling = next(iter(lora_modules(model).values())).scaling
    plain.load_state_dict(merge_state({k: v.detach() for k, v in model.state_dict().items()}, scaling), strict=True)
    merged, _ = plain(idx)
    assert (merged - unmerged).abs().max() <= 1e-6

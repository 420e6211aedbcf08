"""Tiny trained tatu checkpoints (char and BPE) and eval files for the transformers/lm-eval tests.

Trained for a few dozen steps so the logits are far from uniform: an export that scrambles a
weight shows up in every number, not only in the last digits.
"""
from __future__ import annotations

from pathlib import Path

import torch

from tiny_world import EN_WORDS, PT_WORDS, sentences

BLOCK = 48
# accents, emoji (unseen by the char tokenizer: byte fallback), specials typed as text, odd spaces
EXTRA_LINES = [
    "Olá, coração! Ação, água, pão e café às três.",
    "Emoji 🦜🇧🇷 👩🏽‍💻 fim.",
    "A line naming <|bos|> and <|eos|>.",
    "tab\tand  two  spaces",
    "ÀÉÎÕÜ çñß ø ∑ 中文",
]


def corpus() -> list[str]:
    return sentences(PT_WORDS, 300, 0) + sentences(EN_WORDS, 300, 1)


def _train(model, ids: list[int], steps: int, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    data = torch.tensor(ids)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(data) - BLOCK - 1, (8,), generator=gen)
        x = torch.stack([data[s : s + BLOCK] for s in starts])
        y = torch.stack([data[s + 1 : s + BLOCK + 1] for s in starts])
        _, nll = model(x, y)
        opt.zero_grad()
        nll.mean().backward()
        opt.step()
    model.eval()


def make_world(root: Path) -> dict:
    """root/{char,bpe} checkpoints and the eval files short.txt (every line fits one window),
    long.txt (every line longer than the context) and mixed.txt (held-out sentences + extras)."""
    from tatu.model.checkpoint import save_checkpoint
    from tatu.model.gpt import GPT, GPTConfig
    from tatu.model.tokenizer import train_tokenizer

    texts = corpus()
    files = {
        "short": [s for s in sentences(EN_WORDS, 12, 5, lo=1, hi=4) + sentences(PT_WORDS, 12, 6, lo=1, hi=4)]
        + EXTRA_LINES[1:3],
        "long": [" ".join(sentences(PT_WORDS, 8, 10 + i)) for i in range(4)],
        "mixed": sentences(PT_WORDS, 16, 7) + sentences(EN_WORDS, 16, 8) + EXTRA_LINES,
    }
    paths = {}
    for name, lines in files.items():
        paths[name] = root / f"{name}.txt"
        paths[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    ckpts = {}
    for kind in ("char", "bpe"):
        tok = train_tokenizer(kind, texts, vocab_size=420 if kind == "bpe" else None)
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=BLOCK, n_layer=2, n_head=2, n_embd=32))
        _train(model, [i for t in texts for i in [tok.bos_id, *tok.encode(t)]], steps=40)
        for line in files["short"]:
            assert len(tok.encode(line)) <= BLOCK, f"{kind}: short line longer than the context: {line!r}"
        for line in files["long"]:
            assert len(tok.encode(line)) > BLOCK, f"{kind}: long line fits the context: {line!r}"
        ckpts[kind] = save_checkpoint(root / kind, model=model, model_config=model.config, tokenizer=tok,
                                      meta={"step": 40, "trunk_reference": {"enRuler": {"nll_sum": [1.5, 2.25]}}})
    return {"root": root, "ckpt": ckpts, "files": paths, "lines": files}


def require_hf():
    """Skip without the hf extra (make test installs it); under CI_STRICT=1 (.ci/run) fail instead."""
    import importlib.util
    import os

    from strict import cannot_run

    missing = [m for m in ("transformers", "lm_eval") if importlib.util.find_spec(m) is None]
    if missing:
        cannot_run(f"{', '.join(missing)} not installed: pip install -e '.[hf]' (make test installs it)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

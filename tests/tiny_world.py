"""A tiny, self-contained world for daemon tests: synthetic Portuguese/English text,
generated instruction pairs, a char tokenizer, a data dir built through `tatu data build`.

Synthetic on purpose: these tests must not depend on the Debian packages the demo uses.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from tatu.daemon.config import PREFIXES as RUN_PREFIXES

PT_WORDS = ("o a os as um uma de do da em no na que com para por não mais casa água ação coração "
            "cidade tempo vida mundo dia noite rio mar sol lua terra gente trabalho caminho livro "
            "escola amigo família história música palavra pão café janela porta é foi são está tem "
            "vai faz disse olhou abriu fechou correu andou cantou bonito grande pequeno velho novo").split()
EN_WORDS = ("the a an of to in on and with for is was are were be has have it this that he she they "
            "house water river sea sun moon day night time world life book school friend music word "
            "bread coffee window door said looked opened closed ran walked sang small large old new "
            "beautiful quickly slowly because when where which while").split()


# The held-out sets tests/daemon/conftest.py's five_sets adds to the three roles (and a task, "numbers").
HELD_OUT_EXTRA = ("ptNews", "ptLit")


def clean_environ() -> dict[str, str]:
    """This process's environment without run variables: a stray one in the caller's shell
    would reach the daemon's config check (and its typo check) in a child process."""
    return {k: v for k, v in os.environ.items() if not k.startswith(RUN_PREFIXES)}


def sentences(words, n, seed, lo=5, hi=14):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(lo, hi)
        s = " ".join(rng.choice(words) for _ in range(k))
        out.append(s[0].upper() + s[1:] + ".")
    return out


def write_sources(src: Path, seed: int = 0, n_pairs: int = 240) -> Path:
    from tatu.data.sft_gen import generate_pairs

    src.mkdir(parents=True, exist_ok=True)
    pt = sentences(PT_WORDS, 900, seed)
    en = sentences(EN_WORDS, 900, seed + 1)
    (src / "pt_corpus.txt").write_text("\n\n".join(" ".join(pt[i:i + 3]) for i in range(0, 840, 3)) + "\n", encoding="utf-8")
    (src / "en_corpus.txt").write_text("\n\n".join(" ".join(en[i:i + 3]) for i in range(0, 840, 3)) + "\n", encoding="utf-8")
    (src / "pt_val.txt").write_text("\n".join(pt[840:870]) + "\n", encoding="utf-8")
    (src / "en_ruler.txt").write_text("\n".join(en[840:880]) + "\n", encoding="utf-8")
    pairs = generate_pairs(n_pairs, seed)
    held, train = pairs[:20], pairs[20:]
    for name, rows in (("sft_train.jsonl", train), ("sft_held.jsonl", held)):
        (src / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return src


def build_world(root: Path, seq_len: int = 192) -> Path:
    """root/sources, root/tokenizer.json, root/data: returns the data dir."""
    from tatu.ops.demo import prepare_data

    src = write_sources(root / "sources")
    return prepare_data(src, root, "char", 0, seq_len)


def base_env(data: Path, out: Path, **extra) -> dict[str, str]:
    """A complete, small run configuration (what a unit's EnvironmentFile would hold)."""
    env = {
        "TATU_DATA": str(data), "TATU_OUT": str(out), "TATU_DEVICE": "cpu", "TATU_SEED": "7",
        "TATU_MICRO_BATCH": "2", "TATU_SEQ_LEN": "192", "TATU_N_LAYER": "1", "TATU_N_HEAD": "2",
        "TATU_N_EMBD": "32", "TATU_BLOCK_SIZE": "192", "TATU_EVAL_RESAMPLES": "200", "TATU_MEM_FLOOR_MB": "0",
        "TATU_GEN_PROMPTS": "4", "TATU_GEN_TOKENS": "8",
        # exact numbers on every machine: auto would be bf16 on a CPU with AMX and fp32 elsewhere
        "TATU_PRECISION": "fp32",
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


def sft_env(world: dict, out: Path, **extra) -> dict[str, str]:
    """A 6-step SFT run from the session's tiny trunk (conftest.py's `tiny_trunk`), writing under out."""
    settings = dict(TATU_RUN="run", TATU_SEED_CKPT=world["trunk"], SFT_GE=2, REPLAY_N=1, MIX_STEPS_LIMIT=6,
                    EVAL_EVERY=3, TATU_LR="1e-3", TATU_CKPT_EVERY=3)
    settings.update(extra)
    return base_env(world["data"], out, **settings)


def daemon(env: dict[str, str], *args: str, **kwargs) -> subprocess.CompletedProcess:
    """`python -m tatu.daemon ARGS` with env on top of a clean environment, to its end."""
    return subprocess.run([sys.executable, "-m", "tatu.daemon", *args], env={**clean_environ(), **env},
                          capture_output=True, text=True, timeout=300, **kwargs)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    """predicate()'s first true value, polled every interval; an AssertionError naming what after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def all_finite(ckpt) -> list[str]:
    """Names of the floating tensors of a loaded checkpoint that hold NaN or inf (none: [])."""
    import torch

    groups = {"model": ckpt.model_state, **ckpt.extra_tensors}
    return [f"{g}/{k}" for g, ts in groups.items() for k, t in ts.items()
            if t.is_floating_point() and not bool(torch.isfinite(t).all())]

"""Fixtures the daemon's tests share: a run with held-out sets and a task, and a small real tmpfs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from strict import cannot_run
from tiny_world import HELD_OUT_EXTRA, PT_WORDS, base_env, sentences


@pytest.fixture(scope="session")
def five_sets(tiny_trunk, built_once):
    """The tiny world's data rebuilt with two more eval sets (HELD_OUT_EXTRA) and a multiple-choice
    task ("numbers"), and a 4-step SFT run on it (an eval every 2 steps): its run dir. Read it, never write it."""
    from tatu.daemon.main import main as daemon_main
    from tatu.data.task_gen import generate_task
    from tatu.ops import cli

    def build(root: Path) -> None:
        src = tiny_trunk["root"] / "sources"
        for i, name in enumerate(HELD_OUT_EXTRA):
            (root / f"{name}.txt").write_text("\n".join(sentences(PT_WORDS, 12 + i, seed=100 + i)) + "\n", encoding="utf-8")
        (root / "numbers.jsonl").write_text("".join(json.dumps(i, ensure_ascii=False) + "\n"
                                                    for i in generate_task("numbers", 10, 0)), encoding="utf-8")
        data = root / "data"
        assert cli.main(["data", "build", "--task", f"numbers={root / 'numbers.jsonl'}",
                         "--tokenizer", str(tiny_trunk["root"] / "tokenizer.json"), "--out", str(data),
                         "--text", f"pretrain={src / 'pt_corpus.txt'},{src / 'en_corpus.txt'}",
                         "--text", f"replay={src / 'en_corpus.txt'}", "--sft", f"sft={src / 'sft_train.jsonl'}",
                         "--eval", f"sftHeld={src / 'sft_held.jsonl'}", "--eval", f"ptVal={src / 'pt_val.txt'}",
                         "--eval", f"enRuler={src / 'en_ruler.txt'}",
                         *[a for n in HELD_OUT_EXTRA for a in ("--eval", f"{n}={root / (n + '.txt')}")], "--seq-len", "192"]) == 0
        env = base_env(data, root / "runs", TATU_RUN="five", TATU_SEED_CKPT=tiny_trunk["trunk"], SFT_GE=2, REPLAY_N=1,
                       MIX_STEPS_LIMIT=4, EVAL_EVERY=2, TATU_LR="1e-3", TATU_GEN_PROMPTS=0)
        assert daemon_main(env) == 0

    root = built_once("held_out", build)  # one for every xdist worker too
    return root / "runs" / "five"


@pytest.fixture
def small_tmpfs(tmp_path):
    """mount_tmpfs(size, inodes=None) -> a real tmpfs of that size under tmp_path, unmounted after."""
    mounted = []

    def mount_tmpfs(size: str, inodes: int | None = None) -> Path:
        point = tmp_path / f"tmpfs{len(mounted)}"
        point.mkdir()
        options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
        if os.geteuid() != 0 or shutil.which("mount") is None:
            cannot_run("a small tmpfs needs root and mount(8)")
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True, text=True)
        if proc.returncode != 0:
            cannot_run(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount_tmpfs
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], check=False)

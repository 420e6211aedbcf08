"""The README's "Your own run", walked as a newcomer would: a fresh shell where only the README's
two-command section was followed (`tatu` is not on its PATH until `. .venv/bin/activate`), a
directory of one's own with a tiny corpus and pairs, every command pasted as the README prints
it, under a real user manager (tests/systemd_harness.py), up to `tatu status` answering for
the started unit.

The commands are read from README.md itself, so the test breaks when the README drifts. Only
the scale changes, each replacement asserted to be in the README: the trunk trains 4 steps, not
5000, and the shell exports a tiny model's shape (TATU_N_LAYER, ...: the pretrain reads them;
the unit and the smoke read the env file alone, as they would for the operator). `~` is a home
whose .config is the manager's config directory (%E). Run under the lock:
`flock /tmp/tatu-systemd.lock .venv/bin/pytest -q tests/systemd/test_your_own_run.py`.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from systemd_harness import scrub_environment_for_units, user_manager_session
from tiny_world import write_sources

pytestmark = pytest.mark.systemd

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent
# (as the README says it, as the test runs it): the scale, nothing else
SCALE = (("MIX_STEPS_LIMIT=5000 tatu run", "MIX_STEPS_LIMIT=4 tatu run"),)
# What the operator's own shell holds for the trunk from scratch: a tiny model, fast and exact.
TINY_SHELL = {"TATU_N_LAYER": "1", "TATU_N_HEAD": "2", "TATU_N_EMBD": "32", "TATU_DEVICE": "cpu",
              "TATU_MICRO_BATCH": "2", "TATU_EVAL_RESAMPLES": "200", "TATU_MEM_FLOOR_MB": "0",
              "TATU_GEN_PROMPTS": "0", "TATU_PRECISION": "fp32", "OMP_NUM_THREADS": "1"}
# The README's file names -> tests/tiny_world.py's sources
CORPUS = {"corpus_pt.txt": "pt_corpus.txt", "corpus_en.txt": "en_corpus.txt", "pt_val.txt": "pt_val.txt",
          "en_ruler.txt": "en_ruler.txt", "pairs.jsonl": "sft_train.jsonl", "held.jsonl": "sft_held.jsonl"}


def section(heading: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def activation() -> str:
    """The two-command section's instruction for a new shell (the one block that is not `make`)."""
    blocks = [b for b in sh_blocks(section("Two commands")) if "make demo" not in b]
    assert len(blocks) == 1, blocks
    return blocks[0]


def own_run() -> str:
    blocks = sh_blocks(section("Your own run"))
    assert len(blocks) == 1, blocks
    script = blocks[0]
    for said, run in SCALE:
        assert said in script, f"README's Your own run no longer says {said!r}"
        script = script.replace(said, run)
    return script


def test_the_blocks_are_found_and_hold_the_walk():
    """Without a manager: what the walk below pastes is there (and this fails where it drifts)."""
    assert activation().strip() == ". .venv/bin/activate"
    # make demo's last line says the same, where the demo's own "Next:" commands are printed
    demo_target = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "`. .venv/bin/activate`" in demo_target.replace("\\`", "`")
    script = own_run()
    for command in ("tatu tokenizer train", "tatu data build", "tatu units install --run run5 --env-file run5.env",
                    "tatu smoke --env-file ~/.config/tatu/run5.env", "systemctl --user start tatu-sft@run5",
                    "tatu status run5"):
        assert command in script, command


def fresh_shell_environment(home: Path, um) -> dict[str, str]:
    """A login shell's environment for this user: no venv on PATH, no run variable, this manager's dirs."""
    path = ":".join(p for p in os.environ.get("PATH", "").split(":") if p and Path(p) != VENV_BIN)
    env = {"PATH": path or "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
           "XDG_RUNTIME_DIR": str(um.runtime_dir), "XDG_CONFIG_HOME": str(um.config_home)}
    return {**env, **TINY_SHELL}


def test_the_readmes_own_run_as_pasted_reaches_tatu_status_of_the_started_unit(tmp_path):
    home = tmp_path / "home"
    mine = home / "my-run"  # a directory of the operator's own
    src = write_sources(tmp_path / "src")
    mine.mkdir(parents=True)
    for name, source in CORPUS.items():
        shutil.copy(src / source, mine / name)
    script = (f"set -e\ncd {ROOT}\n"
              "! command -v tatu >/dev/null || { echo 'tatu is already on PATH: not a fresh shell' >&2; exit 99; }\n"
              f"{activation()}\ncd {mine}\n{own_run()}")
    with pytest.MonkeyPatch.context() as mp:
        scrub_environment_for_units(mp)
        with user_manager_session() as um:
            (home / ".config").symlink_to(um.config_home)  # ~/.config is the manager's %E
            um.installed.append("tatu-sft@run5.service")  # stopped at the end whatever happens
            proc = subprocess.run(["bash", "-x", "-c", script], cwd=home, env=fresh_shell_environment(home, um),
                                  capture_output=True, text=True, timeout=900)
            shown = um.show("tatu-sft@run5.service", "ActiveState", "WorkingDirectory")
            installed = (um.config_home / "tatu" / "run5.env").read_text()
            um.systemctl("stop", "tatu-sft@run5.service", check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    # the units run where `tatu units install` ran, on the operator's env file, never the repository's
    assert shown["ActiveState"] == "active" and shown["WorkingDirectory"] == str(mine), shown
    assert installed == (mine / "run5.env").read_text() and "runs/run2" not in installed
    # `tatu status run5`, the block's last command: the started unit's daemon answered
    answered = [line for line in proc.stdout.splitlines() if line.startswith("run5 ")]
    assert answered, output[-4000:]
    assert re.search(r"\bstep [0-9]+/200\b", answered[-1]), answered
    # the smoke before it ran what the unit gets: 2 steps, the data's sequence length
    smoke = (mine / "runs" / "run5-smoke" / "run.log").read_text()
    assert re.search(r"TATU_SEQ_LEN\s+= 256\s+\[data\]", smoke), smoke[:3000]

"""The installed distribution: import names, the `tatu` console script, `tatu generate`."""

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tatu
from package_map import INSTALLED_AS_TATU_X, LISTED, PACKAGE_DIR
from tatu.model.checkpoint import save_checkpoint
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import CharTokenizer
from tatu.ops.cli import COMMANDS

REPO_ROOT = Path(__file__).resolve().parents[2]
TATU = Path(sys.executable).parent / "tatu"
ENV = {**os.environ, "PYTHONIOENCODING": "utf-8"}


def run(args, cwd=REPO_ROOT, **kw):
    return subprocess.run(args, cwd=cwd, capture_output=True, env=ENV, timeout=120, **kw)


@pytest.mark.parametrize("where", ["repo_root", "tmp_dir"])
def test_bare_model_import_fails_but_tatu_model_works(where, tmp_path):
    cwd = REPO_ROOT if where == "repo_root" else tmp_path
    for name in INSTALLED_AS_TATU_X:
        bare = run([sys.executable, "-c", f"import {name}"], cwd=cwd)
        assert bare.returncode != 0, name
        # From the repo root the folder is found and refuses itself; elsewhere it is not found.
        expected = f"import tatu.{name}, not {name}" if where == "repo_root" else "ModuleNotFoundError"
        assert expected in bare.stderr.decode(), name
    good = run([sys.executable, "-c", "import tatu.model.gpt, tatu.model.tokenizer; print(tatu.model.gpt.__name__)"], cwd=cwd)
    assert good.returncode == 0, good.stderr.decode()
    assert good.stdout.decode().strip() == "tatu.model.gpt"


def test_console_script_help_and_version():
    assert TATU.exists(), f"no console script at {TATU}"
    help_out = run([str(TATU), "--help"])
    assert help_out.returncode == 0
    assert b"usage: tatu" in help_out.stdout and b"generate" in help_out.stdout
    version = run([str(TATU), "--version"])
    assert version.returncode == 0
    assert version.stdout.decode().strip() == f"tatu {tatu.__version__}"
    unknown = run([str(TATU), "frobnicate"])
    assert unknown.returncode == 2 and b"frobnicate" in unknown.stderr


def test_every_package_folder_is_in_the_wheel():
    """pyproject lists packages by hand; an editable install finds a sub-package it does not list,
    the wheel leaves it out. Every folder with an __init__.py under a mapped folder is listed, and
    every listed package has its folder."""
    listed, folders = set(LISTED), PACKAGE_DIR
    on_disk = set()
    for package, folder in folders.items():
        for init in (REPO_ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO_ROOT / folder)
            on_disk.add(".".join([package, *rel.parts]))
    assert not on_disk - listed, f"folders pyproject's packages leave out of the wheel: {sorted(on_disk - listed)}"
    no_folder = [p for p in listed if not (REPO_ROOT / folders.get(p, p.replace(".", "/")) / "__init__.py").exists()]
    assert not no_folder, f"packages without a folder: {no_folder}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_names_a_module_with_its_functions(command):
    """ops/cli.py imports a subcommand only when it runs: a stale module path would show only then."""
    module, add_args, main, _ = COMMANDS[command]
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"tatu {command}: no module {module}"
    tree = ast.parse(Path(spec.origin).read_text())
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    defined |= {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert {add_args, main} <= defined, f"tatu {command}: {module} lacks {sorted({add_args, main} - defined)}"


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    tok = CharTokenizer.train(["o tatu-bola se enrola numa bola", "ação coração"])
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=48, n_layer=2, n_head=2, n_embd=16)).eval()
    with torch.no_grad():  # scaled up so greedy output varies from prompt to prompt
        for p in model.parameters():
            p.mul_(8)
    path = save_checkpoint(tmp_path_factory.mktemp("ck") / "tiny", model=model, model_config=model.config, tokenizer=tok)
    return path, model, tok


def expected_line(model, tok, prompt, n):
    out = model.generate([[tok.bos_id, *tok.encode(prompt)]], n, eos_id=tok.eos_id)[0]
    return prompt + tok.decode(out)


def test_generate_one_prompt(tiny_checkpoint):
    path, model, tok = tiny_checkpoint
    result = run([str(TATU), "generate", str(path), "--prompt", "o tatu", "--max-new-tokens", "8"])
    assert result.returncode == 0, result.stderr.decode()
    expected = expected_line(model, tok, "o tatu", 8)
    assert len(expected) > len("o tatu")
    assert result.stdout.decode("utf-8") == expected + "\n"


def test_generate_prompts_file_batched(tiny_checkpoint, tmp_path):
    path, model, tok = tiny_checkpoint
    prompts = ["o", "ação coração", "tatu-bola se"]
    file = tmp_path / "prompts.txt"
    file.write_text("\n".join(prompts) + "\n\n", encoding="utf-8")
    result = run([str(TATU), "generate", str(path), "--prompts", str(file), "--max-new-tokens", "6"])
    assert result.returncode == 0, result.stderr.decode()
    expected = "".join(expected_line(model, tok, p, 6) + "\n" for p in prompts)
    assert result.stdout.decode("utf-8") == expected


def test_generate_missing_checkpoint_exits_bad_data_naming_it(tmp_path):
    missing = tmp_path / "no_ckpt"
    result = run([str(TATU), "generate", str(missing), "--prompt", "x"])
    assert result.returncode == 65
    assert str(missing) in result.stderr.decode()


def run_generate(path, *args):
    return run([str(TATU), "generate", str(path), *args])


def assert_one_line_error(result, code, *must_name):
    stderr = result.stderr.decode("utf-8")
    assert result.returncode == code, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    for name in must_name:
        assert name in stderr, (name, stderr)
    assert result.stdout == b""


def test_generate_prompt_longer_than_block_size_is_a_usage_error(tiny_checkpoint):
    path, model, _ = tiny_checkpoint
    result = run_generate(path, "--prompt", "ok", "--prompt", "o" * 60)
    assert_one_line_error(result, 2, "--prompt 2", "61 tokens", f"block_size {model.config.block_size}")


def test_generate_prompts_file_line_too_long_is_bad_data_naming_the_line(tiny_checkpoint, tmp_path):
    path, model, _ = tiny_checkpoint
    file = tmp_path / "prompts.txt"
    file.write_text("o tatu\n\n" + "a" * 47 + "\n", encoding="utf-8")  # BOS + 47 = block_size: no room
    result = run_generate(path, "--prompts", str(file))
    assert_one_line_error(result, 65, f"{file}:3", "48 tokens", f"block_size {model.config.block_size}")


def test_generate_empty_prompts_file_is_bad_data(tiny_checkpoint, tmp_path):
    path, _, _ = tiny_checkpoint
    file = tmp_path / "prompts.txt"
    file.write_text("\n  \n", encoding="utf-8")
    assert_one_line_error(run_generate(path, "--prompts", str(file)), 65, str(file), "no prompts")


@pytest.mark.parametrize(
    "flag,value", [("--max-new-tokens", "0"), ("--max-new-tokens", "-5"), ("--top-k", "0"), ("--temperature", "-1")]
)
def test_generate_bad_numbers_are_usage_errors(tiny_checkpoint, flag, value):
    path, _, _ = tiny_checkpoint
    result = run_generate(path, "--prompt", "o", flag, value)
    assert_one_line_error(result, 2, flag, value)


def test_generate_on_cuda_without_cuda_is_a_usage_error(tiny_checkpoint):
    """A machine without CUDA, on every machine: CUDA_VISIBLE_DEVICES="" hides any GPU from the
    child's torch, so this runs (and can fail) on a CUDA host too instead of skipping there."""
    path, _, _ = tiny_checkpoint
    result = subprocess.run([str(TATU), "generate", str(path), "--prompt", "o", "--device", "cuda"], cwd=REPO_ROOT,
                            capture_output=True, env={**ENV, "CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert_one_line_error(result, 2, "--device", "cuda")


def test_generate_unknown_device_is_a_usage_error(tiny_checkpoint):
    path, _, _ = tiny_checkpoint
    assert_one_line_error(run_generate(path, "--prompt", "o", "--device", "tpu9"), 2, "--device", "tpu9")


def test_generate_legacy_pt_with_a_broken_tokenizer_is_bad_data(tiny_checkpoint, tmp_path):
    _, model, _ = tiny_checkpoint
    pt = tmp_path / "sft_best.pt"
    torch.save({"model": model.state_dict(), "config": model.config.to_dict()}, pt)
    (tmp_path / "tokenizer.json").write_text('{"kind": "char"', encoding="utf-8")
    assert_one_line_error(run_generate(pt, "--prompt", "o"), 65, str(tmp_path / "tokenizer.json"))


def test_generate_checkpoint_whose_tokenizer_does_not_fit_the_model_is_bad_data(tiny_checkpoint, tmp_path):
    _, model, tok = tiny_checkpoint
    other = CharTokenizer(list("xyz"))
    bad = save_checkpoint(tmp_path / "bad", model=model, model_config=model.config, tokenizer=other)
    result = run_generate(bad, "--prompt", "o")
    assert_one_line_error(result, 65, str(bad), str(other.vocab_size), str(tok.vocab_size))

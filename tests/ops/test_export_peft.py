"""`tatu export --format peft`: a LoRA run's adapter loads with the real peft onto the real
transformers GPT-2 and gives tatu's logits; its base is verified; the tied embedding stays the seed's."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest
import torch

from hf_models import require_hf
from strict import cannot_run
from tiny_world import base_env, clean_environ

from tatu.daemon.main import main as daemon_main
from tatu.model.checkpoint import load_checkpoint


def tatu_export(ckpt, out, fmt="peft") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tatu.ops.cli", "export", str(ckpt), "--format", fmt, str(out)],
                          env=clean_environ(), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def lora_runs(tiny_trunk, tmp_path_factory):
    require_hf()
    if importlib.util.find_spec("peft") is None:
        cannot_run("peft not installed: pip install -e '.[hf]' (make venv installs it)")
    root = tmp_path_factory.mktemp("peft")
    seed = root / "seed"
    shutil.copytree(tiny_trunk["trunk"], seed)  # a copy: one test changes it
    runs = {}
    for name, extra in {"lora": {"TATU_LORA_TARGETS": "attn.c_attn,mlp.c_proj"},
                        "emb": {"TATU_TRAIN_EMBEDDINGS": "1"}}.items():
        env = base_env(tiny_trunk["data"], root / "runs", TATU_RUN=name, TATU_SEED_CKPT=seed, SFT_GE=2, REPLAY_N=1,
                       MIX_STEPS_LIMIT=4, EVAL_EVERY=4, TATU_LR="2e-2", TATU_GEN_PROMPTS=0, TATU_TRAIN="lora",
                       TATU_LORA_RANK=2, **extra)
        assert daemon_main(env) == 0
        runs[name] = root / "runs" / name / "final"
    return {"root": root, "seed": seed, **runs}


def ids(ckpt_path, n=3, length=40):
    vocab = load_checkpoint(ckpt_path).model_config.vocab_size
    return torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(1))


def test_peft_loads_the_adapter_onto_the_exported_base_with_tatus_logits(lora_runs):
    from peft import PeftModel
    from transformers import GPT2LMHeadModel

    out = lora_runs["root"] / "adapter"
    proc = tatu_export(lora_runs["lora"], out)
    assert proc.returncode == 0, proc.stderr[-1500:]
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["fan_in_fan_out"] is True and config["r"] == 2
    assert config["target_modules"] == ["transformer.h.0.attn.c_attn", "transformer.h.0.mlp.c_proj"]
    assert config["base_model_name_or_path"] == str(out / "base")
    model = PeftModel.from_pretrained(GPT2LMHeadModel.from_pretrained(config["base_model_name_or_path"]), out).eval()
    tatu = load_checkpoint(lora_runs["lora"]).build_model().eval()
    x = ids(lora_runs["lora"])
    with torch.no_grad():
        theirs = model(x).logits
        ours, _ = tatu(x)
        seed_logits, _ = load_checkpoint(lora_runs["seed"]).build_model().eval()(x)
    assert (theirs - seed_logits).abs().max() > 1e-3  # the adapter is really applied
    assert (theirs - ours).abs().max() <= 1e-5
    # the tied embedding carries no adapter: the exported base's wte (and so its head) is the seed's
    assert not any("wte" in k or "lm_head" in k for k in load_checkpoint(lora_runs["lora"]).extra_tensors["adapter"])
    base = GPT2LMHeadModel.from_pretrained(out / "base")
    assert torch.equal(base.transformer.wte.weight, load_checkpoint(lora_runs["seed"]).model_state["transformer.wte.weight"])


def test_the_merged_hf_export_of_a_lora_run_gives_tatus_logits(lora_runs):
    from transformers import GPT2LMHeadModel

    out = lora_runs["root"] / "merged-hf"
    assert tatu_export(lora_runs["lora"], out, fmt="hf").returncode == 0
    x = ids(lora_runs["lora"])
    with torch.no_grad():
        theirs = GPT2LMHeadModel.from_pretrained(out).eval()(x).logits
        ours, _ = load_checkpoint(lora_runs["lora"]).build_model().eval()(x)
    assert (theirs - ours).abs().max() <= 1e-5


def test_the_hf_export_of_a_lora_runs_resume_state_is_merged(lora_runs):
    # state/ holds the base and the adapters unmerged (what a resume needs); every other reader
    # gets them merged, the export too: no lora_ key in the file, tatu's logits
    from safetensors.torch import load_file
    from transformers import GPT2LMHeadModel

    state = lora_runs["lora"].parent / "state"
    out = lora_runs["root"] / "state-hf"
    assert tatu_export(state, out, fmt="hf").returncode == 0
    assert not [k for k in load_file(out / "model.safetensors") if "lora" in k]
    x = ids(state)
    with torch.no_grad():
        theirs = GPT2LMHeadModel.from_pretrained(out).eval()(x).logits
        ours, _ = load_checkpoint(state).build_model().eval()(x)
        seed_logits, _ = load_checkpoint(lora_runs["seed"]).build_model().eval()(x)
    assert (theirs - seed_logits).abs().max() > 1e-3  # the adapter is in the exported weights
    assert (theirs - ours).abs().max() <= 1e-5


def test_trained_embeddings_cannot_go_into_an_adapter_65(lora_runs):
    proc = tatu_export(lora_runs["emb"], lora_runs["root"] / "emb-adapter")
    assert proc.returncode == 65 and "TATU_TRAIN_EMBEDDINGS=1" in proc.stderr and "--format hf" in proc.stderr
    assert not (lora_runs["root"] / "emb-adapter").exists()


def test_a_changed_or_missing_base_is_65_naming_it(lora_runs, tmp_path):
    seed = lora_runs["seed"]
    backup = tmp_path / "seed-backup"
    shutil.copytree(seed, backup)
    try:
        other = load_checkpoint(seed)
        state = dict(other.model_state)
        state["transformer.ln_f.weight"] = state["transformer.ln_f.weight"] + 1e-3
        from tatu.model.checkpoint import save_checkpoint

        save_checkpoint(seed, model_state=state, model_config=other.model_config, tokenizer=other.tokenizer, meta=other.meta)
        proc = tatu_export(lora_runs["lora"], tmp_path / "changed")
        assert proc.returncode == 65 and str(seed) in proc.stderr and "has changed" in proc.stderr
        shutil.rmtree(seed)
        proc = tatu_export(lora_runs["lora"], tmp_path / "missing")
        assert proc.returncode == 65 and str(seed) in proc.stderr
        assert not (tmp_path / "changed").exists() and not (tmp_path / "missing").exists()
    finally:
        shutil.rmtree(seed, ignore_errors=True)
        shutil.copytree(backup, seed)


def test_a_full_run_has_no_adapter_to_export(tiny_trunk, tmp_path):
    require_hf()
    proc = tatu_export(tiny_trunk["trunk"], tmp_path / "x")
    assert proc.returncode == 65 and "not a LoRA checkpoint" in proc.stderr

"""Partial training (TATU_TRAIN=top:K | lora): the 78s, what trains, frozen weights untouched and
absent from the optimizer, merged = unmerged, checkpoints that load as any GPT, restarts."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from tiny_world import base_env, clean_environ

from tatu.daemon.config import ConfigError, load_config
from tatu.daemon.main import main as daemon_main
from tatu.model.checkpoint import load_checkpoint
from tatu.model.train_spec import LoraSpec, TrainSpec


@pytest.fixture
def world(tiny_trunk):
    return tiny_trunk


def sft_env(world, out, **extra):
    settings = dict(TATU_RUN="run", TATU_SEED_CKPT=world["trunk"], SFT_GE=2, REPLAY_N=1, MIX_STEPS_LIMIT=4,
                    EVAL_EVERY=2, TATU_LR="1e-2", TATU_CKPT_EVERY=2, TATU_GEN_PROMPTS=0)
    settings.update(extra)
    return base_env(world["data"], out, **settings)


# --- the 78s -----------------------------------------------------------------------------------

@pytest.mark.parametrize("settings,named", [
    ({"TATU_TRAIN": "top:0"}, "TATU_TRAIN"),
    ({"TATU_TRAIN": "bottom:2"}, "TATU_TRAIN"),
    ({"TATU_TRAIN": "lora", "TATU_LORA_RANK": "0"}, "TATU_LORA_RANK"),
    ({"TATU_TRAIN": "lora", "TATU_LORA_TARGETS": "attn.q_proj"}, "TATU_LORA_TARGETS"),
    ({"TATU_TRAIN": "lora", "TATU_LORA_LAYERS": "first"}, "TATU_LORA_LAYERS"),
    ({"TATU_TRAIN": "lora", "TATU_LORA_LAYERS": "top:0"}, "TATU_LORA_LAYERS"),
    ({"TATU_LORA_RANK": "4"}, "TATU_LORA_RANK"),  # a LoRA variable with TATU_TRAIN=all
    ({"TATU_TRAIN": "top:1", "TATU_LORA_ALPHA": "8"}, "TATU_LORA_ALPHA"),
    ({"TATU_TRAIN_EMBEDDINGS": "1"}, "TATU_TRAIN_EMBEDDINGS"),
    # a trunk from scratch with part of it frozen: no seed to freeze (an empty value is unset)
    ({"TATU_MODE": "pretrain", "TATU_TRAIN": "lora", "TATU_SEED_CKPT": ""}, "TATU_SEED_CKPT"),
    ({"TATU_MODE": "pretrain", "TATU_TRAIN": "top:1", "TATU_SEED_CKPT": ""}, "TATU_SEED_CKPT"),
])
def test_bad_train_settings_exit_78_naming_the_variable_before_torch(tmp_path, settings, named):
    out = tmp_path / "out"
    env = {**clean_environ(), "TATU_DATA": str(tmp_path), "TATU_OUT": str(out), "TATU_SEED_CKPT": str(tmp_path), **settings}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tatu.daemon"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 78, proc.stderr[-800:]
    message = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert any(named in line for line in message), message
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "torch" not in imported and "scipy" not in imported  # the fail-fast path (tests/daemon/test_config.py)
    assert not out.exists()


@pytest.mark.parametrize("settings,named", [({"TATU_TRAIN": "top:2"}, "TATU_TRAIN"),
                                            ({"TATU_TRAIN": "lora", "TATU_LORA_LAYERS": "0,1"}, "TATU_LORA_LAYERS"),
                                            ({"TATU_TRAIN": "lora", "TATU_LORA_LAYERS": "top:3"}, "TATU_LORA_LAYERS")])
def test_more_blocks_than_the_seed_has_exits_78_before_a_trace(world, tmp_path, settings, named):
    proc = subprocess.run([sys.executable, "-m", "tatu.daemon"], env={**clean_environ(), **sft_env(world, tmp_path, **settings)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 78, proc.stderr[-800:]
    output = proc.stdout + proc.stderr
    assert named in output and "n_layer" in output
    assert not (tmp_path / "run").exists()


def test_defaults_and_printed_notes():
    config, _ = load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", "TATU_TRAIN": "lora", "TATU_LORA_RANK": "4"})
    assert config.train_spec == TrainSpec(mode="lora", embeddings=False, lora=LoraSpec(rank=4, alpha=8.0))
    config, _ = load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s"})
    assert config.train_spec == TrainSpec(mode="all", embeddings=True)
    with pytest.raises(ConfigError, match="TATU_LORA_TARGETS"):
        load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", "TATU_TRAIN": "lora", "TATU_LORA_TARGETS": "mlp.c_fc,mlp.c_fc"})


# --- a run: frozen means frozen and free -------------------------------------------------------

@pytest.mark.parametrize("train", ["top:1", "lora"])
def test_frozen_tensors_stay_bit_identical_and_have_no_optimizer_state(world, tmp_path, train):
    env = sft_env(world, tmp_path, TATU_TRAIN=train, **({"TATU_LORA_RANK": "2"} if train == "lora" else {}))
    assert daemon_main(env) == 0
    seed = load_checkpoint(world["trunk"]).model_state
    run = tmp_path / "run"
    state = load_checkpoint(run / "state")
    meta = json.loads((run / "final" / "meta.json").read_text())
    trained = [k for k in state.model_state if k.startswith("transformer.h.0.") or k.startswith("transformer.ln_f.")] \
        if train == "top:1" else [k for k in state.model_state if ".lora_" in k]
    frozen = [k for k in seed if k not in trained]
    assert frozen and trained
    for name in frozen:
        assert torch.equal(state.model_state[name], seed[name]), name
    moved = [k for k in trained if not torch.equal(state.model_state[k], seed[k] if k in seed else torch.zeros_like(state.model_state[k]))]
    assert moved  # what trains did train (a LoRA B starts at zero)
    # the optimizer holds the trained tensors only: one exp_avg and one exp_avg_sq each
    optimizer = load_file(run / "state" / "optimizer.safetensors")
    assert sum(k.endswith(".exp_avg") for k in optimizer) == len(trained)
    assert sum(k.endswith(".exp_avg_sq") for k in optimizer) == len(trained)
    trained_numel = sum(state.model_state[k].numel() for k in trained)
    assert sum(v.numel() for k, v in optimizer.items() if k.endswith(".exp_avg")) == trained_numel
    assert meta["trainable"]["trainable"] == trained_numel
    assert meta["trainable"]["line"] in (run / "run.log").read_text()
    # ... and in the report
    from tatu.ops.report import page as report

    index = report.build_report([run], tmp_path / "report")
    assert f"run trains: {meta['trainable']['line']}" in index.read_text(encoding="utf-8")


# --- checkpoints -------------------------------------------------------------------------------

def test_lora_final_is_merged_plain_weights_with_the_adapter_beside(world, tmp_path):
    from tatu.daemon.trainer import Trainer

    env = sft_env(world, tmp_path, TATU_TRAIN="lora", TATU_LORA_RANK="2", TATU_LORA_ALPHA="8")
    assert daemon_main(env) == 0
    final = load_checkpoint(tmp_path / "run" / "final")
    assert not any(".lora_" in k for k in final.model_state)
    assert set(final.extra_tensors["adapter"]) and all(".lora_" in k for k in final.extra_tensors["adapter"])
    assert final.meta["adapter"]["rank"] == 2 and final.meta["adapter"]["alpha"] == 8.0
    # the unmerged model (resume state: base + adapters) and the merged weights give the same logits
    config, _ = load_config(env)
    state = load_checkpoint(tmp_path / "run" / "state")
    trainer = Trainer(config, state.model_config, torch.device("cpu"), state.model_state, "state")
    merged_model = final.build_model().eval()
    idx = torch.randint(0, final.model_config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, _ = trainer.model.eval()(idx)
        b, _ = merged_model(idx)
        assert (a - b).abs().max() <= 1e-5  # float32: the two orders of summation differ by rounding
        # float64 forwards: what is left is the merged weights' one rounding to float32
        a, _ = trainer.model.double()(idx)
        b, _ = merged_model.double()(idx)
    assert (a - b).abs().max() <= 1e-6
    # the resume state (unmerged) reads as a plain GPT too (the sweep re-scores it after an abort):
    # the same merge, so the very same weights as final/
    plain = state.plain_state()
    assert plain.keys() == final.model_state.keys()
    assert all(torch.equal(plain[k], final.model_state[k]) for k in plain)
    # and a next run seeds from it like from any checkpoint
    assert daemon_main(sft_env(world, tmp_path, TATU_RUN="next", TATU_SEED_CKPT=tmp_path / "run" / "final",
                               MIX_STEPS_LIMIT=2)) == 0


@pytest.mark.parametrize("change", [{"TATU_TRAIN": "top:1"}, {"TATU_TRAIN": "lora", "TATU_LORA_RANK": "4"},
                                    {"TATU_TRAIN": "lora", "TATU_LORA_RANK": "2", "TATU_LORA_TARGETS": "mlp.c_fc"}])
def test_a_restart_with_other_train_settings_is_another_run_78(world, tmp_path, change):
    assert daemon_main(sft_env(world, tmp_path, TATU_TRAIN="lora", TATU_LORA_RANK="2", MIX_STEPS_LIMIT=2)) == 0
    proc = subprocess.run([sys.executable, "-m", "tatu.daemon"],
                          env={**clean_environ(), **sft_env(world, tmp_path, MIX_STEPS_LIMIT=4, **change)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 78, proc.stderr[-800:]
    changed = [k for k in change if not (k == "TATU_TRAIN" and change[k] == "lora")]
    output = proc.stdout + proc.stderr
    assert all(k in output for k in changed) and "start a new TATU_RUN" in output


@pytest.mark.slow
def test_tatu_status_of_a_live_lora_run_says_what_trains(world, tmp_path):
    import time

    from tatu.daemon.control.access import socket_path
    from tatu.daemon.control.client import request
    from tatu.ops.status import format_status

    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    env = {**clean_environ(), "RUNTIME_DIRECTORY": str(runtime),
           **sft_env(world, tmp_path, TATU_TRAIN="lora", TATU_LORA_RANK="2", MIX_STEPS_LIMIT=100_000, EVAL_EVERY=100_000)}
    proc = subprocess.Popen([sys.executable, "-m", "tatu.daemon"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    path = socket_path("run", {"RUNTIME_DIRECTORY": str(runtime)})
    try:
        deadline, status = time.monotonic() + 120, {}
        while "trainable" not in status and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            try:
                status = request(path, "status")
            except Exception:  # not listening yet
                status = {}
        assert status.get("trainable", "").startswith("lora r=2 alpha=4 on 4 modules: "), status
        assert f"trains  {status['trainable']}" in format_status(status)
        request(path, "stop")
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

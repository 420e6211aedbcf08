"""A GPT-2 made outside tatu seeds a run: a random GPT2LMHeadModel created and saved by
transformers, with a byte-level BPE fast tokenizer trained by `tokenizers` and given tatu's
specials through transformers' own API. Data is built with that tokenizer.json, the real daemon
trains from the directory (TATU_SEED_CKPT), and the result exports back to transformers."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from hf_models import require_hf
from tiny_world import base_env, clean_environ, write_sources

from tatu.daemon.main import main as daemon_main
from tatu.model.checkpoint import load_checkpoint
from tatu.model.hf import export_hf
from tatu.model.tokenizer import SPECIALS, load_tokenizer


def outside_gpt2(sources, out):
    """What a peer would hand over: model and tokenizer built with transformers and tokenizers only."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    texts = [(sources / name).read_text(encoding="utf-8") for name in ("pt_corpus.txt", "en_corpus.txt", "sft_train.jsonl")]
    raw.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw)
    torch.manual_seed(3)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=192, n_embd=32, n_layer=1, n_head=2))
    # what the README tells a peer to do with a GPT-2 that lacks tatu's specials
    tok.add_special_tokens({"bos_token": SPECIALS[0], "eos_token": SPECIALS[1], "pad_token": SPECIALS[2],
                            "additional_special_tokens": list(SPECIALS[3:])})
    model.resize_token_embeddings(len(tok))
    model.config.update({"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
                         "pad_token_id": tok.pad_token_id})
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.mark.slow
def test_a_transformers_gpt2_dir_is_accepted_as_a_seed_and_trains(tmp_path):
    require_hf()
    from transformers import AutoModelForCausalLM

    from tatu.evals.words import Dictionary

    sources = write_sources(tmp_path / "sources")
    seed = outside_gpt2(sources, tmp_path / "gpt2-seed")
    data = tmp_path / "data"
    build = subprocess.run(
        [sys.executable, "-m", "tatu.ops.cli", "data", "build", "--tokenizer", str(seed / "tokenizer.json"),
         "--out", str(data), "--text", f"pretrain={sources / 'pt_corpus.txt'},{sources / 'en_corpus.txt'}",
         "--text", f"replay={sources / 'en_corpus.txt'}", "--sft", f"sft={sources / 'sft_train.jsonl'}",
         "--eval", f"sftHeld={sources / 'sft_held.jsonl'}", "--eval", f"ptVal={sources / 'pt_val.txt'}",
         "--eval", f"enRuler={sources / 'en_ruler.txt'}", "--seq-len", "192"],
        capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    Dictionary.build([(sources / "pt_corpus.txt").read_text(encoding="utf-8")], min_count=3).save(data / "dictionary.json")

    start = load_checkpoint(seed)
    assert json.loads((data / "manifest.json").read_text())["tokenizer_hash"] == start.tokenizer.hash
    assert start.tokenizer.kind == "bpe" and start.tokenizer.vocab_size == start.model_config.vocab_size

    env = base_env(data, tmp_path / "runs", TATU_RUN="outside", TATU_SEED_CKPT=seed, SFT_GE=2, REPLAY_N=1,
                   MIX_STEPS_LIMIT=8, EVAL_EVERY=4, TATU_LR="3e-3", TATU_GEN_PROMPTS=0)
    assert daemon_main(env) == 0
    run = tmp_path / "runs" / "outside"
    final = load_checkpoint(run / "final")
    assert final.tokenizer.hash == start.tokenizer.hash
    assert any(not torch.equal(final.model_state[k], v) for k, v in start.model_state.items())
    history = json.loads((run / "state" / "resume.json").read_text())["history"]
    ppl = [h["sets"]["sftHeld"]["ppl"] for h in history]
    assert history[0]["step"] == 0 and history[-1]["step"] == 8
    assert ppl[-1] < ppl[0]  # it trained: held-out SFT responses got likelier

    # and back out: the trained run loads in transformers again
    back = AutoModelForCausalLM.from_pretrained(export_hf(final, tmp_path / "trained-hf")).eval()
    ids = torch.tensor([[final.tokenizer.bos_id, *final.tokenizer.encode("Quanto é dois mais dois?")]])
    ours, _ = final.build_model().eval()(ids)
    with torch.inference_mode():
        assert float((back(ids).logits - ours.detach()).abs().max()) <= 1e-5
    assert load_tokenizer(seed / "tokenizer.json").hash == start.tokenizer.hash

    # a GPT-2 tatu would compute differently stops the daemon cleanly (65), naming the field
    config = json.loads((seed / "config.json").read_text())
    (seed / "config.json").write_text(json.dumps({**config, "activation_function": "relu"}))
    env_refused = {**clean_environ(),
                   **env, "TATU_RUN": "refused"}
    proc = subprocess.run([sys.executable, "-m", "tatu.daemon"], env=env_refused, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 65
    assert "activation_function='relu'" in proc.stdout + proc.stderr

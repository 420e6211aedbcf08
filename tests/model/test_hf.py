"""tatu <-> transformers: export, load with transformers' own classes, same ids, logits and scores;
the round trip bit-identical; GPT-2 directories made by transformers read back (and refused
where tatu would compute something else). Real transformers, no network (HF_HUB_OFFLINE=1)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_models import BLOCK, EXTRA_LINES, make_world, require_hf

from tatu.evals.scoring import evaluate
from tatu.evals.sets import load_eval_set
from tatu.model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.hf import HFFormatError, export_hf, load_checkpoint_or_gpt2, load_hf_dir
from tatu.model.tokenizer import SPECIALS, TokenizerError
from tatu.model.tokenizer_json import HFTokenizerError, load_tokenizer, tokenizer_from_hf, tokenizer_to_hf

KINDS = ("char", "bpe")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    require_hf()
    root = tmp_path_factory.mktemp("hf")
    w = make_world(root)
    w["hf"] = {kind: export_hf(load_checkpoint(w["ckpt"][kind]), root / f"{kind}-hf") for kind in KINDS}
    return w


def hf_pair(world, kind):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = world["hf"][kind]
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def all_lines(world) -> list[str]:
    return [line for lines in world["lines"].values() for line in lines]


# --- what transformers sees --------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_export_is_a_plain_gpt2_dir_with_a_fast_tokenizer(world, kind):
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    model, tok = hf_pair(world, kind)
    assert type(model) is GPT2LMHeadModel
    assert isinstance(tok, PreTrainedTokenizerFast)
    ours = load_checkpoint(world["ckpt"][kind]).tokenizer
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (ours.bos_id, ours.eos_id, ours.pad_id)
    assert tok.convert_tokens_to_ids(["<|user|>", "<|assistant|>"]) == [ours.user_id, ours.assistant_id]
    assert len(tok) == model.config.vocab_size == ours.vocab_size
    gen = json.loads((world["hf"][kind] / "generation_config.json").read_text())
    assert (gen["bos_token_id"], gen["eos_token_id"], gen["pad_token_id"]) == (ours.bos_id, ours.eos_id, ours.pad_id)


@pytest.mark.parametrize("kind", KINDS)
def test_tokenizer_ids_identical_on_eval_sets_accents_emoji_and_specials(world, kind):
    from tokenizers import Tokenizer as RawTokenizer

    _, hf_tok = hf_pair(world, kind)
    raw = RawTokenizer.from_file(str(world["hf"][kind] / "tokenizer.json"))
    ours = load_checkpoint(world["ckpt"][kind]).tokenizer
    lines = all_lines(world) + EXTRA_LINES + ["".join(SPECIALS), "\u00a0\u2028\x0c", "e\u0301 é"]
    for line in lines:
        ids = ours.encode(line)
        assert hf_tok(line)["input_ids"] == ids, line
        assert hf_tok.decode(ids) == line == ours.decode(ids), line
        if "<|" not in line:  # the raw `tokenizers` object matches added tokens in text; transformers splits them
            assert raw.encode(line, add_special_tokens=False).ids == ids, line
    # the specials themselves: tatu's ids, one token each, decoded back to their names
    for name, idx in zip(SPECIALS, (ours.bos_id, ours.eos_id, ours.pad_id, ours.user_id, ours.assistant_id)):
        assert hf_tok.convert_ids_to_tokens(idx) == name
        assert hf_tok.decode([idx]) == name


@pytest.mark.parametrize("kind", KINDS)
def test_logits_equal_tatu_to_1e5_on_every_eval_line(world, kind):
    hf_model, _ = hf_pair(world, kind)
    ckpt = load_checkpoint(world["ckpt"][kind])
    model = ckpt.build_model().eval()
    worst, spread, windows = 0.0, 0.0, 0
    with torch.inference_mode():
        for line in all_lines(world):
            ids = [ckpt.tokenizer.bos_id, *ckpt.tokenizer.encode(line)]
            for start in range(0, len(ids), BLOCK):
                x = torch.tensor([ids[start : start + BLOCK]])
                ours, _ = model(x)
                theirs = hf_model(x).logits
                # NaN or inf on either side fails here: max() and `<=` would let a NaN through.
                assert bool(torch.isfinite(ours).all()) and bool(torch.isfinite(theirs).all()), (line, start)
                assert ours.shape == theirs.shape == (1, x.shape[1], ckpt.tokenizer.vocab_size)
                worst = max(worst, float((ours - theirs).abs().max()))
                spread = max(spread, float(ours.std()))
                windows += 1
    assert windows > 0 and math.isfinite(worst) and worst <= 1e-5, (windows, worst)
    # A model whose logits are all one constant would agree with anything: these vary.
    assert spread > 1e-2, spread


def naive_transformers_scores(hf_model, hf_tok, lines: list[str], block: int):
    """Per-line NLL (float64 log-softmax of transformers' logits) under tatu's rule: BOS first,
    non-overlapping windows of `block` inputs; bytes and chars of the line itself."""
    nll, tokens = [], []
    with torch.inference_mode():
        for line in lines:
            ids = [hf_tok.bos_token_id, *hf_tok(line)["input_ids"]]
            total = 0.0
            for start in range(0, len(ids) - 1, block):
                x = torch.tensor([ids[start : start + block]])
                y = torch.tensor(ids[start + 1 : start + block + 1])
                logp = torch.log_softmax(hf_model(x).logits[0].double(), dim=-1)
                total -= float(logp[torch.arange(len(y)), y].sum())
            nll.append(total)
            tokens.append(len(ids) - 1)
    return nll, tokens


@pytest.mark.parametrize("kind", KINDS)
def test_per_line_nll_ppl_bpb_through_transformers_equal_tatu_eval(world, kind):
    hf_model, hf_tok = hf_pair(world, kind)
    ckpt = load_checkpoint(world["ckpt"][kind])
    model = ckpt.build_model()
    for name, path in world["files"].items():
        result = evaluate(model, load_eval_set(path, ckpt.tokenizer, name=name), n_resamples=100)
        lines = world["lines"][name]
        nll, tokens = naive_transformers_scores(hf_model, hf_tok, lines, BLOCK)
        assert result.scores.n_tokens.tolist() == tokens
        for ours, theirs in zip(result.scores.nll_sum, nll):
            assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-5)
        n_bytes = sum(len(line.encode("utf-8")) for line in lines)
        assert result.ppl == pytest.approx(math.exp(sum(nll) / sum(tokens)), rel=1e-6)
        assert result.bpb == pytest.approx(sum(nll) / math.log(2) / n_bytes, abs=1e-6)
        assert result.bpc == pytest.approx(sum(nll) / math.log(2) / sum(len(line) for line in lines), abs=1e-6)


def test_the_naive_reference_sees_a_scrambled_export(world, tmp_path):
    """The other direction: a transposition forgotten in one layer must break the equality above."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    broken = tmp_path / "broken"
    export_hf(load_checkpoint(world["ckpt"]["bpe"]), broken)
    state = load_file(broken / "model.safetensors")
    w = state["transformer.h.0.mlp.c_proj.weight"]
    state["transformer.h.0.mlp.c_proj.weight"] = w.reshape(w.shape[::-1]).t().contiguous()  # same shape, wrong layout
    save_file(state, broken / "model.safetensors", metadata={"format": "pt"})
    ckpt = load_checkpoint(world["ckpt"]["bpe"])
    result = evaluate(ckpt.build_model(), load_eval_set(world["files"]["short"], ckpt.tokenizer), n_resamples=100)
    nll, _ = naive_transformers_scores(AutoModelForCausalLM.from_pretrained(broken).eval(),
                                       AutoTokenizer.from_pretrained(broken), world["lines"]["short"], BLOCK)
    assert abs(sum(nll) - float(result.scores.nll_sum.sum())) > 1e-3


# --- round trips -------------------------------------------------------------------------------

CKPT_FILES = ("model.safetensors", "config.json", "tokenizer.json", "meta.json")


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_tatu_hf_tatu_is_bit_identical(world, kind, tmp_path):
    original = load_checkpoint(world["ckpt"][kind])
    back = load_checkpoint_or_gpt2(world["hf"][kind])
    assert back.tokenizer.hash == original.tokenizer.hash
    assert back.model_config == original.model_config
    assert back.meta == original.meta
    assert back.model_state.keys() == original.model_state.keys()
    for name, tensor in original.model_state.items():
        assert back.model_state[name].dtype == tensor.dtype and torch.equal(back.model_state[name], tensor), name
    resaved = save_checkpoint(tmp_path / "again", model_state=back.model_state, model_config=back.model_config,
                              tokenizer=back.tokenizer, meta=back.meta)
    for name in CKPT_FILES:
        assert (resaved / name).read_bytes() == (world["ckpt"][kind] / name).read_bytes(), name
    again = export_hf(load_checkpoint(resaved), tmp_path / "hf-again")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (again / name).read_bytes() == (world["hf"][kind] / name).read_bytes(), name


@pytest.mark.parametrize("kind", KINDS)
def test_a_dir_written_by_transformers_save_pretrained_reads_back_identically(world, kind, tmp_path):
    model, tok = hf_pair(world, kind)
    model.save_pretrained(tmp_path / "saved")
    tok.save_pretrained(tmp_path / "saved")
    back = load_checkpoint_or_gpt2(tmp_path / "saved")
    original = load_checkpoint(world["ckpt"][kind])
    assert back.tokenizer.hash == original.tokenizer.hash
    assert back.model_config == original.model_config
    assert all(torch.equal(back.model_state[k], v) for k, v in original.model_state.items())


@pytest.mark.parametrize("kind", KINDS)
def test_data_build_accepts_the_exported_tokenizer_json(world, kind, tmp_path):
    """TATU_SEED_CKPT=OUT needs data built with OUT's tokenizer: the manifest hash must be the seed's."""
    exported = world["hf"][kind] / "tokenizer.json"
    assert load_tokenizer(exported).hash == load_checkpoint_or_gpt2(world["hf"][kind]).tokenizer.hash
    out = tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-m", "tatu.ops.cli", "data", "build", "--tokenizer", str(exported), "--out", str(out),
         "--text", f"pretrain={world['files']['mixed']}", "--eval", f"ptVal={world['files']['short']}",
         "--seq-len", "32", "--one-per-line"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer_hash"] == load_checkpoint(world["ckpt"][kind]).tokenizer.hash


# --- refusals ----------------------------------------------------------------------------------

def test_export_refuses_a_model_without_biases(tmp_path, world):
    tok = load_checkpoint(world["ckpt"]["char"]).tokenizer
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=8, bias=False))
    save_checkpoint(tmp_path / "nobias", model=model, model_config=model.config, tokenizer=tok)
    proc = subprocess.run([sys.executable, "-m", "tatu.ops.cli", "export", str(tmp_path / "nobias"), "--format", "hf",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 65
    assert "bias=False" in proc.stderr and "GPT-2" in proc.stderr
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.tmp-*"))


def test_export_cli_writes_a_dir_and_refuses_an_existing_one(world, tmp_path):
    cmd = [sys.executable, "-m", "tatu.ops.cli", "export", str(world["ckpt"]["bpe"]), "--format", "hf", str(tmp_path / "o")]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert {p.name for p in (tmp_path / "o").iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json",
                                                             "tokenizer_config.json", "generation_config.json"}
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert second.returncode == 78 and "already exists" in second.stderr
    missing = subprocess.run(cmd[:4] + [str(tmp_path / "nope"), "--format", "hf", str(tmp_path / "o2")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 65 and "nope" in missing.stderr


def _edited_copy(world, tmp_path, **config_changes) -> Path:
    import shutil

    target = tmp_path / "edited"
    shutil.copytree(world["hf"]["bpe"], target)
    config = json.loads((target / "config.json").read_text())
    config.update(config_changes)
    (target / "config.json").write_text(json.dumps(config))
    return target


@pytest.mark.parametrize("change, needle", [
    ({"activation_function": "relu"}, "activation_function"),
    ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon"),
    ({"n_inner": 100}, "n_inner"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ({"tie_word_embeddings": False}, "tie_word_embeddings"),
    ({"attn_pdrop": 0.3}, "dropouts"),
    ({"vocab_size": 999}, "vocab_size 999"),
])
def test_gpt2_settings_tatu_would_compute_differently_are_refused(world, tmp_path, change, needle):
    target = _edited_copy(world, tmp_path, **change)
    with pytest.raises(CheckpointError, match=needle) as info:
        load_checkpoint_or_gpt2(target)
    assert str(target / "config.json") in str(info.value) or str(target) in str(info.value)


def test_the_accepted_gelu_variants_both_load(world, tmp_path):
    assert load_hf_dir(_edited_copy(world, tmp_path, activation_function="gelu_new")).model_config.n_layer == 2


def test_a_tokenizer_without_tatus_specials_is_refused_with_the_fix(world):
    payload = tokenizer_to_hf(load_checkpoint(world["ckpt"]["bpe"]).tokenizer)
    base = payload["added_tokens"][0]["id"]
    payload["added_tokens"] = [{"id": base, "content": "<|endoftext|>", "special": True}]  # GPT-2's own
    with pytest.raises(TokenizerError, match=r"<\|bos\|>.*add them"):
        tokenizer_from_hf(payload, "gpt2/tokenizer.json")
    char = tokenizer_to_hf(load_checkpoint(world["ckpt"]["char"]).tokenizer)
    char["model"]["vocab"]["ab"] = char["model"]["vocab"].pop(next(t for t, i in char["model"]["vocab"].items() if i == 256))
    with pytest.raises(HFTokenizerError, match="not tatu's char tokenizer"):
        tokenizer_from_hf(char, "odd/tokenizer.json")
    wordpiece = {"model": {"type": "WordPiece", "vocab": {}}, "added_tokens": []}
    with pytest.raises(TokenizerError, match="WordPiece"):
        tokenizer_from_hf(wordpiece, "bert/tokenizer.json")


def test_an_untied_lm_head_is_refused(world, tmp_path):
    from safetensors.torch import load_file, save_file

    target = _edited_copy(world, tmp_path)
    state = load_file(target / "model.safetensors")
    state["lm_head.weight"] = state["transformer.wte.weight"] + 1.0
    save_file(state, target / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(HFFormatError, match="lm_head"):
        load_checkpoint_or_gpt2(target)


def test_the_daemon_and_the_loaders_never_import_transformers(world):
    code = ("import sys; import tatu.daemon.loop, tatu.daemon.main; from tatu.model.hf import load_checkpoint_or_gpt2; "
            f"load_checkpoint_or_gpt2({str(world['hf']['char'])!r}); "
            "bad = [m for m in ('transformers', 'lm_eval', 'datasets') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_gpt2s_endoftext_listed_in_vocab_and_added_tokens_keeps_the_specials_after_it(world):
    """GPT-2's tokenizer.json has <|endoftext|> twice (vocab and added_tokens, one id): the
    specials tatu needs come right after it, not after a double count."""
    original = load_checkpoint(world["ckpt"]["bpe"]).tokenizer
    payload = tokenizer_to_hf(original)
    n = len(payload["model"]["vocab"])
    payload["model"]["vocab"]["<|endoftext|>"] = n
    payload["added_tokens"] = [{"id": n, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True}] + [
        {**t, "id": t["id"] + 1} for t in payload["added_tokens"]]
    tok = tokenizer_from_hf(payload, "gpt2-like/tokenizer.json")
    assert (tok.bos_id, tok.vocab_size) == (n + 1, n + 1 + len(SPECIALS))
    assert tok.encode("Olá, coração!") == original.encode("Olá, coração!")

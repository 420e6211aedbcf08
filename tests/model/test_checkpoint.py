"""The checkpoint directory: bit-exact, verified, atomic; legacy .pt files load weights-only."""

import json
import os

import pytest
import torch

from tatu.model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import CharTokenizer

TEXTS = ["o tatu-bola se enrola", "ação e coração", "the armadillo"]


@pytest.fixture(scope="module")
def tok():
    return CharTokenizer.train(TEXTS)


@pytest.fixture
def model(tok):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()


def logits_of(model, tok):
    ids = torch.tensor([[tok.bos_id, *tok.encode("o tatu")]])
    with torch.no_grad():
        return model(ids)[0]


def save(path, model, tok, **kw):
    return save_checkpoint(path, model=model, model_config=model.config, tokenizer=tok, **kw)


def test_round_trip_is_bit_exact(tmp_path, model, tok):
    meta = {"step": 12, "metrics": {"enRuler": 52.1}, "note": "ação ✓"}
    adam = {"exp_avg.0": torch.randn(3, 4), "step": torch.tensor(7, dtype=torch.int64)}
    rng = {"cpu": torch.get_rng_state()}
    resume = {"stream": {"cursor": [1, 2, 3]}, "seed": 1337}
    save(tmp_path / "ck", model, tok, meta=meta, extra_tensors={"optim": adam, "rng": rng}, extra_json={"resume": resume})
    ck = load_checkpoint(tmp_path / "ck")
    assert ck.model_config == model.config
    assert ck.meta == meta
    assert ck.tokenizer.hash == tok.hash
    assert ck.extra_json == {"resume": resume}
    assert set(ck.extra_tensors) == {"optim", "rng"}
    for name, tensor in adam.items():
        assert torch.equal(ck.extra_tensors["optim"][name], tensor) and ck.extra_tensors["optim"][name].dtype == tensor.dtype
    assert torch.equal(ck.extra_tensors["rng"]["cpu"], rng["cpu"])
    rebuilt = ck.build_model().eval()
    original, loaded = model.state_dict(), rebuilt.state_dict()
    assert set(original) == set(loaded)
    for name in original:
        assert torch.equal(original[name], loaded[name]), name
    assert rebuilt.lm_head.weight.data_ptr() == rebuilt.transformer.wte.weight.data_ptr()  # still tied
    assert torch.equal(logits_of(model, tok), logits_of(rebuilt, tok))


def test_tied_head_is_stored_once(tmp_path, model, tok):
    ck = load_checkpoint(save(tmp_path / "ck", model, tok))
    assert "lm_head.weight" not in ck.model_state
    assert "transformer.wte.weight" in ck.model_state


def test_manifest_lists_the_sha256_of_every_file(tmp_path, model, tok):
    import hashlib

    path = save(tmp_path / "ck", model, tok, extra_json={"resume": {}})
    manifest = json.loads((path / "manifest.json").read_text())
    on_disk = {p.name for p in path.iterdir()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((path / name).read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_weights_are_refused_naming_the_file(tmp_path, model, tok, damage):
    path = save(tmp_path / "ck", model, tok)
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        data = data[: len(data) - 100]
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256 mismatch") as excinfo:
        load_checkpoint(path)
    assert str(weights) in str(excinfo.value)


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json", "manifest.json"])
def test_missing_file_is_named(tmp_path, model, tok, name):
    path = save(tmp_path / "ck", model, tok)
    (path / name).unlink()
    with pytest.raises(CheckpointError) as excinfo:
        load_checkpoint(path)
    assert str(path / name) in str(excinfo.value)


def test_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint") as excinfo:
        load_checkpoint(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(excinfo.value)


def test_crash_between_renames_still_loads_the_old_copy(tmp_path, model, tok):
    path = save(tmp_path / "ck", model, tok, meta={"step": 1})
    os.rename(path, tmp_path / "ck.old")  # the state after "path -> path.old", before "tmp -> path"
    assert load_checkpoint(tmp_path / "ck").meta == {"step": 1}
    # The next save recovers and ends with one clean checkpoint.
    save(tmp_path / "ck", model, tok, meta={"step": 2})
    assert load_checkpoint(tmp_path / "ck").meta == {"step": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_save_over_an_existing_checkpoint_replaces_it_cleanly(tmp_path, model, tok):
    save(tmp_path / "ck", model, tok, meta={"step": 1}, extra_json={"resume": {"a": 1}})
    with torch.no_grad():
        model.transformer.wte.weight.add_(1.0)
    save(tmp_path / "ck", model, tok, meta={"step": 2})
    ck = load_checkpoint(tmp_path / "ck")
    assert ck.meta == {"step": 2}
    assert ck.extra_json == {}  # nothing of the old checkpoint survives
    assert torch.equal(ck.model_state["transformer.wte.weight"], model.transformer.wte.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_save_refuses_reserved_extra_names_and_ambiguous_sources(tmp_path, model, tok):
    with pytest.raises(ValueError, match="reserved"):
        save(tmp_path / "ck", model, tok, extra_json={"meta": {}})
    with pytest.raises(ValueError, match="exactly one"):
        save_checkpoint(tmp_path / "ck", model_config=model.config, tokenizer=tok)


def test_weights_that_do_not_fit_the_config_are_refused(tmp_path, model, tok):
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    del state["transformer.h.1.mlp.c_fc.weight"]
    path = save_checkpoint(tmp_path / "ck", model_state=state, model_config=model.config, tokenizer=tok)
    with pytest.raises(CheckpointError, match="do not fit") as excinfo:
        load_checkpoint(path).build_model()
    assert str(path) in str(excinfo.value)


def _legacy_payload(model, prefix=""):
    return {"model": {prefix + k: v for k, v in model.state_dict().items()}, "config": model.config.to_dict()}


@pytest.mark.parametrize("prefix", ["", "_orig_mod."])
def test_legacy_pt_loads_weights_only_with_identical_logits(tmp_path, model, tok, prefix):
    pt = tmp_path / "sft_best.pt"
    torch.save(_legacy_payload(model, prefix), pt)
    tok.save(tmp_path / "tokenizer.json")
    ck = load_checkpoint(pt)
    assert ck.tokenizer.hash == tok.hash
    assert ck.model_config == model.config
    assert not any(k.startswith("_orig_mod.") or k == "lm_head.weight" for k in ck.model_state)
    rebuilt = ck.build_model().eval()
    assert torch.equal(logits_of(model, tok), logits_of(rebuilt, tok))
    for name, tensor in model.state_dict().items():
        assert torch.equal(rebuilt.state_dict()[name], tensor), name


def test_legacy_pt_with_the_tokenizer_inside(tmp_path, model, tok):
    pt = tmp_path / "best.pt"
    torch.save({**_legacy_payload(model), "tokenizer": tok.to_dict(), "meta": {"step": 3}}, pt)
    ck = load_checkpoint(pt)
    assert ck.tokenizer.hash == tok.hash and ck.meta == {"step": 3}


def test_legacy_pt_without_tokenizer_is_refused(tmp_path, model):
    pt = tmp_path / "lonely.pt"
    torch.save(_legacy_payload(model), pt)
    with pytest.raises(CheckpointError, match="no tokenizer") as excinfo:
        load_checkpoint(pt)
    assert str(pt) in str(excinfo.value)


class Payload:
    """A custom class: unpickling it would run arbitrary code, so weights_only must refuse it."""

    def __reduce__(self):
        return (os.getcwd, ())


def test_legacy_pt_with_a_pickled_object_is_refused(tmp_path, model, tok):
    pt = tmp_path / "evil.pt"
    torch.save({**_legacy_payload(model), "extra": Payload()}, pt)
    tok.save(tmp_path / "tokenizer.json")
    with pytest.raises(CheckpointError, match="weights-only") as excinfo:
        load_checkpoint(pt)
    assert str(pt) in str(excinfo.value)


def test_legacy_pt_that_is_not_a_torch_file_is_refused(tmp_path):
    pt = tmp_path / "junk.pt"
    pt.write_bytes(b"not a torch file at all")
    with pytest.raises(CheckpointError) as excinfo:
        load_checkpoint(pt)
    assert str(pt) in str(excinfo.value)


def test_legacy_pt_with_a_foreign_config_is_refused_naming_the_file(tmp_path, model, tok):
    path = tmp_path / "sft_best.pt"
    config = {**model.config.to_dict(), "rope_theta": 10000.0}  # a field tatu's GPT does not have
    torch.save({"model": model.state_dict(), "config": config, "tokenizer": tok.to_dict()}, path)
    with pytest.raises(CheckpointError, match=r"sft_best\.pt: model config does not fit"):
        load_checkpoint(path)


# --- inconsistent or broken pieces: always a CheckpointError naming the file ------------------

BROKEN_TOKENIZERS = {
    "not_json": "{this is not json",
    "missing_chars": json.dumps({"kind": "char", "version": 1, "specials": list(CharTokenizer([]).to_dict()["specials"])}),
    "unknown_kind": json.dumps({"kind": "wordpiece", "specials": CharTokenizer([]).to_dict()["specials"]}),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_TOKENIZERS))
def test_legacy_pt_with_a_broken_tokenizer_json_beside_it_is_refused(tmp_path, model, broken):
    pt = tmp_path / "sft_best.pt"
    torch.save(_legacy_payload(model), pt)
    (tmp_path / "tokenizer.json").write_text(BROKEN_TOKENIZERS[broken])
    with pytest.raises(CheckpointError) as excinfo:
        load_checkpoint(pt)
    assert str(tmp_path / "tokenizer.json") in str(excinfo.value)


def test_legacy_pt_with_a_broken_tokenizer_inside_is_refused(tmp_path, model, tok):
    pt = tmp_path / "best.pt"
    inner = {k: v for k, v in tok.to_dict().items() if k != "chars"}
    torch.save({**_legacy_payload(model), "tokenizer": inner}, pt)
    with pytest.raises(CheckpointError) as excinfo:
        load_checkpoint(pt)
    assert str(pt) in str(excinfo.value)


def _rewrite_with_valid_hash(path, name, data: bytes):
    """Replace one file and its manifest entry, so only the content is wrong, not the hash."""
    import hashlib

    (path / name).write_bytes(data)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256(data).hexdigest()
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("broken", sorted(BROKEN_TOKENIZERS))
def test_checkpoint_with_a_broken_tokenizer_is_refused(tmp_path, model, tok, broken):
    path = save(tmp_path / "ck", model, tok)
    _rewrite_with_valid_hash(path, "tokenizer.json", BROKEN_TOKENIZERS[broken].encode())
    with pytest.raises(CheckpointError) as excinfo:
        load_checkpoint(path)
    assert str(path / "tokenizer.json") in str(excinfo.value)


@pytest.mark.parametrize("config", ["{not json", '{"vocab_size": 10, "rope_theta": 1.0}', '{"block_size": 8}',
                                    '{"vocab_size": 10, "n_embd": 30, "n_head": 4}'])
def test_checkpoint_with_a_broken_config_is_refused(tmp_path, model, tok, config):
    path = save(tmp_path / "ck", model, tok)
    _rewrite_with_valid_hash(path, "config.json", config.encode())
    with pytest.raises(CheckpointError) as excinfo:
        load_checkpoint(path)
    assert str(path / "config.json") in str(excinfo.value)


def test_weights_of_the_wrong_shape_are_refused_naming_the_file(tmp_path, model, tok):
    """Same parameter names, other sizes: load_state_dict's size mismatch becomes a CheckpointError."""
    bigger = GPT(GPTConfig(**{**model.config.to_dict(), "block_size": 32}))
    pt = tmp_path / "sft_best.pt"
    torch.save({"model": bigger.state_dict(), "config": model.config.to_dict(), "tokenizer": tok.to_dict()}, pt)
    with pytest.raises(CheckpointError, match="size mismatch") as excinfo:
        load_checkpoint(pt).build_model()
    assert str(pt) in str(excinfo.value)


def test_tokenizer_and_model_of_different_vocab_sizes_are_refused(tmp_path, model, tok):
    other = CharTokenizer(list("abc"))
    assert other.vocab_size != model.config.vocab_size
    path = save_checkpoint(tmp_path / "ck", model=model, model_config=model.config, tokenizer=other)
    with pytest.raises(CheckpointError, match=rf"{other.vocab_size}.*{model.config.vocab_size}") as excinfo:
        load_checkpoint(path)
    assert str(path) in str(excinfo.value)
    pt = tmp_path / "legacy.pt"
    torch.save({**_legacy_payload(model), "tokenizer": other.to_dict()}, pt)
    with pytest.raises(CheckpointError, match=rf"{other.vocab_size}.*{model.config.vocab_size}") as excinfo:
        load_checkpoint(pt)
    assert str(pt) in str(excinfo.value)


def test_a_directory_of_checkpoints_names_them_in_one_line(tmp_path, model, tok, monkeypatch):
    """`tatu generate demo/runs/trunk` once said "manifest.json: missing or invalid": a run's
    directory is named with the checkpoints in it, as paths relative to where it was given."""
    run = tmp_path / "runs" / "trunk"
    for name in ("final", "best"):
        save(run / name, model, tok)
    (run / "events.jsonl").write_text("{}\n")
    (run / "tb").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError) as excinfo:
        load_checkpoint("runs/trunk")
    message = str(excinfo.value)
    assert message == "runs/trunk: not a checkpoint (no manifest.json) but a directory of them: runs/trunk/best, runs/trunk/final"
    assert load_checkpoint(message.rsplit(", ", 1)[1]).model_state.keys() == model.state_dict().keys() - {"lm_head.weight"}


@pytest.mark.parametrize("name, text, what", [("tokenizer.json", '{"kind": "char"}', "a JSON file"),
                                              ("run.log", "EVAL 0: sftHeld 9.1\n", "not a torch file"),
                                              ("empty.pt", "", "an empty file")])
def test_a_file_that_is_no_checkpoint_says_so_in_one_line(tmp_path, name, text, what):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CheckpointError) as excinfo:
        load_checkpoint(path)
    message = str(excinfo.value)
    assert message.startswith(f"{path}: not a checkpoint ({what}); a checkpoint is a directory holding manifest.json")
    assert "\n" not in message and "weights_only" not in message


def test_a_refused_pickle_says_why_in_one_line_without_advising_an_unsafe_load(tmp_path, model, tok):
    pt = tmp_path / "evil.pt"
    torch.save({**_legacy_payload(model), "extra": Payload()}, pt)
    with pytest.raises(CheckpointError) as excinfo:
        load_checkpoint(pt)
    message = str(excinfo.value)
    assert "\n" not in message and "getcwd" in message and "weights_only" not in message, message


def test_the_metadata_alone_reads_verified_as_load_checkpoint_reads_it(tmp_path, model, tok):
    """read_meta: what the sweep and the run report read of a checkpoint, without its weights, hashed
    against the manifest as every load is (once read raw, a meta.json edited or torn after the save
    gave the sweep's cost estimate and the run report a config nobody saved)."""
    from tatu.model.checkpoint import read_meta

    meta = {"step": 12, "config": {"TATU_SEED": "1"}}
    path = save(tmp_path / "ck", model, tok, meta=meta)
    assert read_meta(path) == load_checkpoint(path).meta == meta
    os.rename(path, tmp_path / "ck.old")  # a save that died mid-swap: its previous copy is read
    assert read_meta(path) == meta
    os.rename(tmp_path / "ck.old", path)
    (path / "meta.json").write_text(json.dumps({**meta, "step": 13}))
    with pytest.raises(CheckpointError, match=r"meta\.json: sha256 mismatch with manifest\.json"):
        read_meta(path)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        read_meta(tmp_path / "none")


def test_the_run_reports_config_is_the_verified_metadata(tmp_path, model, tok):
    from tatu.ops.report.runs import _read_config

    run = tmp_path / "run"
    save(run / "state", model, tok, meta={"config": {"TATU_SEED": "1"}, "trainable": {"line": "all"}})
    assert _read_config(run)[0] == {"TATU_SEED": "1"}
    (run / "state" / "meta.json").write_text(json.dumps({"config": {"TATU_SEED": "2"}}))
    config, note = _read_config(run)[0], _read_config(run)[-1]  # (config, metadata, where or why not)
    assert config is None and note.startswith(f"{run / 'state' / 'meta.json'}: unreadable (") and "sha256 mismatch" in note

"""sweep/judge/scores.py's cache: keyed by everything that decides the lines, checked on every read.

With EVAL_EN_ALL=0 the ruler is a subsample drawn by TATU_SEED, so the same trunk checkpoint
is scored on other lines for each member: a cache keyed by the checkpoint alone handed seed 2
the lines seed 1 scored."""
from __future__ import annotations

import json

import pytest
import torch

from tiny_world import base_env, build_world


@pytest.fixture(scope="module")
def trunk(tmp_path_factory):
    from tatu.model.checkpoint import save_checkpoint
    from tatu.model.gpt import GPT, GPTConfig
    from tatu.model.tokenizer_json import load_tokenizer

    root = tmp_path_factory.mktemp("scores")
    data = build_world(root)
    tokenizer = load_tokenizer(root / "tokenizer.json")
    torch.manual_seed(0)  # untrained weights: which lines were scored is what this test is about
    config = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=192, n_layer=1, n_head=2, n_embd=32)
    model = GPT(config)
    ckpt = save_checkpoint(root / "trunk" / "final", model=model, model_config=config, tokenizer=tokenizer, meta={})
    return {"root": root, "data": data, "ckpt": ckpt}


def _env(trunk, seed: int, **extra) -> dict:
    settings = {"TATU_SEED": seed, "TATU_SEED_CKPT": trunk["ckpt"], "EVAL_EN_ALL": 0, "EVAL_EN_BATCHES": 2, "EVAL_BATCH": 3}
    return base_env(trunk["data"], trunk["root"] / "runs", **{**settings, **extra})


def test_each_seed_gets_the_trunk_scored_on_its_own_ruler_subsample(trunk, tmp_path):
    from tatu.sweep.judge.scores import score_checkpoint

    cache = tmp_path / "scores"
    first = score_checkpoint(trunk["ckpt"], _env(trunk, 1), cache)
    second = score_checkpoint(trunk["ckpt"], _env(trunk, 2), cache)
    fresh = score_checkpoint(trunk["ckpt"], _env(trunk, 2), tmp_path / "no-cache-yet")
    assert len(first["enRuler"]["line_index"]) == 6
    assert first["enRuler"]["line_index"] != fresh["enRuler"]["line_index"]  # the seeds subsample other lines
    assert second == fresh  # ... and seed 2 gets its own, not seed 1's from the cache
    assert score_checkpoint(trunk["ckpt"], _env(trunk, 1), cache) == first  # a cache hit for the same lines
    # With every line scored, the seed decides nothing: one cache entry serves every member.
    whole = [score_checkpoint(trunk["ckpt"], _env(trunk, s, EVAL_EN_ALL=1), cache) for s in (1, 2)]
    assert whole[0] == whole[1] and len(whole[0]["enRuler"]["line_index"]) == 40
    assert len(list(cache.glob("*.json"))) == 3


def test_a_cached_file_whose_lines_do_not_match_is_never_returned(trunk, tmp_path):
    from tatu.sweep.judge.scores import score_checkpoint

    cache = tmp_path / "scores"
    right = score_checkpoint(trunk["ckpt"], _env(trunk, 3), cache)
    (path,) = cache.glob("*.json")
    doc = json.loads(path.read_text())
    doc["scores"]["enRuler"]["line_index"] = doc["scores"]["enRuler"]["line_index"][::-1]
    doc["scores"]["enRuler"]["nll_sum"] = [0.0] * len(doc["scores"]["enRuler"]["nll_sum"])
    path.write_text(json.dumps(doc))
    assert score_checkpoint(trunk["ckpt"], _env(trunk, 3), cache) == right  # re-scored, not the tampered copy
    assert json.loads(path.read_text())["scores"] == right

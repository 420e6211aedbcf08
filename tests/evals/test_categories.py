"""Per-category ppl and bpc (tatu.evals.categories) against a naive per-token float64 computation
written here: each target token's word found from the decoded prefix, its category read from the
units, each line run alone through a float64 copy of the model. The reference passes the rig's
masks and fails a mask shifted by one token. Units are written by hand: no tagger needed."""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import re

import numpy as np
import pytest
import torch

from tatu.data.sft import parse_sft_line
from tatu.evals.categories import category_results, token_categories, word_chars
from tatu.evals.scoring import compare_results, evaluate
from tatu.evals.sets import EvalLine, EvalSet
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import CharTokenizer

BLOCK = 16
TEXTS = ["o gato dorme no sofá", "Ana viu dois rios, ontem.", "a casa velha caiu"]
# (start, end, category, tag) per unit, character spans of each text
UNITS = [
    [[0, 1, "function", "det"], [2, 6, "noun", "n"], [7, 12, "verb", "vblex"], [13, 15, "function", "pr"],
     [16, 20, "unknown", "*"]],
    [[0, 3, "proper", "np"], [4, 7, "verb", "vblex"], [8, 12, "number", "num"], [13, 17, "noun", "n"],
     [17, 18, "punct", "cm"], [19, 24, "adverb", "adv"], [24, 25, "punct", "sent"]],
    [[0, 1, "function", "det"], [2, 6, "noun", "n"], [7, 12, "adjective", "adj"], [13, 17, "verb", "vblex"]],
]
PAIR = '{"prompt": "diga algo", "response": "o gato dorme"}'
PAIR_UNITS = [[0, 1, "function", "det"], [2, 6, "noun", "n"], [7, 12, "verb", "vblex"]]


@pytest.fixture(scope="module")
def world():
    tok = CharTokenizer.train(TEXTS + ["diga algo"])
    torch.manual_seed(3)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=BLOCK, n_layer=2, n_head=2, n_embd=32))
    with torch.no_grad():
        model.transformer.wte.weight.mul_(10.0)
    lines = [EvalLine([tok.bos_id, *tok.encode(t)], [False] + [True] * len(tok.encode(t)), t) for t in TEXTS]
    example = parse_sft_line(PAIR.encode(), "pair.jsonl", 1)
    ids, is_target = example.encode(tok)
    lines.append(EvalLine(ids, is_target, example.scored_text))
    eval_set = EvalSet(name="mixed", path=None, kind="text", lines=lines, tokenizer_hash=tok.hash)
    return tok, model, eval_set, UNITS + [PAIR_UNITS]


def naive_categories(tok, line: EvalLine, units) -> list[str | None]:
    """Each target token's category: the token's first non-space character located by decoding
    the targets before it, the word (letters, hyphens) around it, the unit holding its start."""
    targets = [t for t, is_t in zip(line.ids, line.is_target) if is_t]
    out, text_so_far = [], ""
    for t in targets:
        if t in tok.special_ids:
            out.append(None)
            continue
        piece = tok.decode([t])
        start = len(text_so_far) + (len(piece) - len(piece.lstrip(" ")))
        text_so_far += piece
        if not piece.strip():  # all whitespace: no word
            out.append(None)
            continue
        words = [m for m in re.finditer(r"[^\W\d_]+(?:-[^\W\d_]+)*", line.text)]
        word = next((m for m in words if m.start() <= start < m.end()), None)
        if word is None:
            out.append(None)
            continue
        unit = next((u for u in units if u[0] <= word.start() < u[1]), None)
        out.append(unit[2] if unit else "unknown")
    return out


def naive_category(model, tok, eval_set, all_units, category, shift: int = 0) -> tuple[float, float]:
    """(ppl, bpc) of `category`, one line at a time in float64; shift moves every mask by that many tokens."""
    model64 = copy.deepcopy(model).double().eval()
    nll_total, tokens, chars = 0.0, 0, 0
    for line, units in zip(eval_set.lines, all_units):
        cats = naive_categories(tok, line, units)
        cats = cats[-shift:] + cats[:-shift] if shift else cats
        # non-overlapping windows of BLOCK inputs, as the rig cuts a line longer than the context
        logps = []
        for start in range(0, len(line.ids) - 1, BLOCK):
            with torch.no_grad():
                logits, _ = model64(torch.tensor([line.ids[start:min(start + BLOCK, len(line.ids) - 1)]]))
            logps.append(torch.log_softmax(logits[0].double(), dim=-1))
        logp = torch.cat(logps)
        positions = [i for i in range(1, len(line.ids)) if line.is_target[i]]
        for pos, cat in zip(positions, cats):
            if cat == category:
                nll_total -= float(logp[pos - 1, line.ids[pos]])
                tokens += 1
        words = {(m.start(), m.end()) for m in re.finditer(r"[^\W\d_]+(?:-[^\W\d_]+)*", line.text)}
        chars += sum(e - s for s, e in words if next((u[2] for u in units if u[0] <= s < u[1]), "unknown") == category)
    return math.exp(nll_total / tokens), nll_total / math.log(2) / chars


def rig(tok, model, eval_set, all_units):
    whole = evaluate(model, eval_set, n_resamples=200, seed=0, per_token=True)
    categories = token_categories(eval_set, tok, all_units)
    return whole, categories, category_results(whole, categories, word_chars(eval_set, tok, categories), 200, 0)


def test_masked_ppl_and_bpc_equal_the_naive_float64_reference(world):
    tok, model, eval_set, all_units = world
    whole, categories, results = rig(tok, model, eval_set, all_units)
    assert categories == [naive_categories(tok, line, u) for line, u in zip(eval_set.lines, all_units)]
    assert set(results) == {"function", "noun", "verb", "unknown", "proper", "number", "adverb", "adjective"}
    for category, result in results.items():
        ppl, bpc = naive_category(model, tok, eval_set, all_units, category)
        assert result.ppl == pytest.approx(ppl, rel=1e-6), category
        assert result.bpc == pytest.approx(bpc, rel=1e-6), category
    # the per-token NLLs add up to the whole-set sums the rig has always computed
    assert np.allclose([t.sum() for t in whole.scores.token_nll], whole.scores.nll_sum, rtol=1e-12)


def test_a_categorys_bpc_survives_its_json_and_a_restriction_to_its_lines(world):
    # what a resumed run and the sweep's crossed report read back: the same bpc, not None
    tok, model, eval_set, all_units = world
    _, _, results = rig(tok, model, eval_set, all_units)
    noun = results["noun"]
    again = type(noun).from_json(json.loads(json.dumps(noun.to_json())), n_resamples=200, seed=0)
    assert noun.bpc is not None and again.bpc == noun.bpc and again.bpb == noun.bpb and again.ppl == noun.ppl
    same = noun.restricted_to(noun.line_index.tolist(), noun.lines_sha256, n_resamples=200, seed=0)
    assert same.bpc == noun.bpc and same.ppl == noun.ppl
    # a plain position mask's chars are the whole line's: its bpc stays None both ways
    plain = dataclasses.replace(noun, bpc=None, bpb=None)
    assert type(plain).from_json(json.loads(json.dumps(plain.to_json())), n_resamples=200).bpc is None
    assert plain.restricted_to(noun.line_index.tolist(), noun.lines_sha256, n_resamples=200).bpc is None


def test_the_reference_catches_a_mask_shifted_by_one_token(world):
    tok, model, eval_set, all_units = world
    _, _, results = rig(tok, model, eval_set, all_units)
    for category in ("noun", "verb"):
        shifted, _ = naive_category(model, tok, eval_set, all_units, category, shift=1)
        assert abs(results[category].ppl / shifted - 1) > 1e-3, category


def test_a_category_compared_with_itself_is_flat_and_paired_over_its_lines(world):
    tok, model, eval_set, all_units = world
    _, _, results = rig(tok, model, eval_set, all_units)
    paired = compare_results(results["noun"], results["noun"], n_resamples=200, seed=0)
    assert paired.ratio == pytest.approx(1.0) and paired.lo == pytest.approx(1.0)
    # "proper" has tokens on one line only: the others carry no information about it
    assert results["proper"].n_lines == 1

"""The eval rig against independent references: a one-line-at-a-time, unbatched float64
computation written here (log_softmax + gather on a float64 copy of the model), closed forms
(uniform logits -> ppl == V; char-level bpc), and the eval-set reader's contract."""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tatu.evals.masks import WORD_LISTS
from tatu.evals.line_scores import score_lines
from tatu.evals.scoring import compare_results, evaluate
from tatu.evals.sets import EvalLine, EvalSet, load_eval_set, sample_lines, subsample, target_word_masks
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import CharTokenizer

VOCAB = 40
BLOCK = 16


def tiny_model(seed: int = 0, vocab: int = VOCAB) -> GPT:
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab, block_size=BLOCK, n_layer=2, n_head=2, n_embd=32))
    # larger weights than GPT-2's init so per-token NLLs differ a lot between tokens and lines
    with torch.no_grad():
        model.transformer.wte.weight.mul_(10.0)
    return model


def naive_line_nll(model64: GPT, line: EvalLine, mask: list[bool] | None = None) -> tuple[float, int]:
    """(sum NLL, tokens) of one line, alone, in float64; non-overlapping windows of BLOCK inputs."""
    target_positions = [i for i in range(1, len(line.ids)) if line.is_target[i]]
    keep = set(target_positions if mask is None else [p for p, m in zip(target_positions, mask) if m])
    total, count = 0.0, 0
    for start in range(0, len(line.ids) - 1, BLOCK):
        window = line.ids[start : start + BLOCK]
        with torch.no_grad():
            logits, _ = model64(torch.tensor([window]))
        logp = torch.log_softmax(logits[0].double(), dim=-1)
        for offset in range(len(window)):
            pos = start + offset + 1  # the token this position predicts
            if pos < len(line.ids) and pos in keep:
                total -= float(logp[offset, line.ids[pos]])
                count += 1
    return total, count


def naive_ppl(model: GPT, lines, masks=None) -> float:
    model64 = copy.deepcopy(model).double().eval()
    sums = [naive_line_nll(model64, line, None if masks is None else masks[i]) for i, line in enumerate(lines)]
    return math.exp(sum(s for s, _ in sums) / sum(c for _, c in sums))


def random_lines(rng: np.random.Generator, lengths: list[int], pairs_like: bool) -> list[EvalLine]:
    lines = []
    for n in lengths:
        ids = rng.integers(0, VOCAB, n).tolist()
        if pairs_like:  # a prompt that is context, then targets
            cut = int(rng.integers(1, n))
            is_target = [False] * cut + [True] * (n - cut)
        else:
            is_target = [False] + [True] * (n - 1)
        lines.append(EvalLine(ids, is_target, "a" * n))
    return lines


MODEL = tiny_model()


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(2, 4 * BLOCK + 3), min_size=1, max_size=12),
    budget=st.integers(1, 300),
    pairs_like=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_ppl_equals_unbatched_float64_reference(lengths, budget, pairs_like, seed):
    rng = np.random.default_rng(seed)
    lines = random_lines(rng, lengths, pairs_like)
    scores = score_lines(MODEL, lines, token_budget=budget)
    ppl = math.exp(scores.nll_sum.sum() / scores.n_tokens.sum())
    # float32 model vs the float64 reference: on a set of a single target token the ppl's relative
    # error is that token's float32 NLL error itself (seen: 1.07e-6), so 2e-6, not 1e-6.
    assert ppl == pytest.approx(naive_ppl(MODEL, lines), rel=2e-6)
    # and line by line, in the order given
    model64 = copy.deepcopy(MODEL).double().eval()
    for line, nll, n in zip(lines, scores.nll_sum, scores.n_tokens):
        ref_nll, ref_n = naive_line_nll(model64, line)
        assert n == ref_n
        assert nll == pytest.approx(ref_nll, rel=1e-5, abs=1e-5)


def test_batching_padding_and_order_do_not_change_scores():
    rng = np.random.default_rng(1)
    lines = random_lines(rng, [3, 50, 7, 16, 17, 2, 33, 9], pairs_like=False)
    one_row_per_batch = score_lines(MODEL, lines, token_budget=1)
    everything_at_once = score_lines(MODEL, lines, token_budget=10_000)
    np.testing.assert_allclose(everything_at_once.nll_sum, one_row_per_batch.nll_sum, rtol=1e-6)
    np.testing.assert_array_equal(everything_at_once.n_tokens, one_row_per_batch.n_tokens)
    order = rng.permutation(len(lines))
    shuffled = score_lines(MODEL, [lines[i] for i in order], token_budget=64)
    np.testing.assert_allclose(shuffled.nll_sum, one_row_per_batch.nll_sum[order], rtol=1e-6)


def test_long_line_is_scored_in_windows_with_exact_counts():
    n = int(3.5 * BLOCK)
    line = random_lines(np.random.default_rng(2), [n], pairs_like=False)[0]
    scores = score_lines(MODEL, [line], token_budget=BLOCK)
    assert scores.n_tokens.tolist() == [n - 1]
    ref_nll, ref_n = naive_line_nll(copy.deepcopy(MODEL).double().eval(), line)
    assert ref_n == n - 1
    assert scores.nll_sum[0] == pytest.approx(ref_nll, rel=1e-6)


def test_uniform_logits_give_ppl_equal_to_vocab_size():
    model = tiny_model(vocab=VOCAB)
    with torch.no_grad():
        model.transformer.wte.weight.zero_()  # tied lm_head: every logit is exactly 0
    lines = random_lines(np.random.default_rng(3), [5, 40, 2, 17], pairs_like=True)
    result = evaluate(model, EvalSet("u", "u.txt", "text", lines), n_resamples=200)
    # log(V) is rounded to float32 once per token, hence 1e-6 rather than bit equality
    assert result.ppl == pytest.approx(VOCAB, rel=1e-6)
    assert result.ci.lo == pytest.approx(VOCAB, rel=1e-6) and result.ci.hi == pytest.approx(VOCAB, rel=1e-6)


def test_char_level_bpc_is_nats_per_token_over_ln2_times_tokens_per_char(tmp_path):
    texts = ["Olá, ação rápida!", "o gato é bonito", "água fria e pão quente", "x"]
    tok = CharTokenizer.train(texts)
    path = tmp_path / "pt.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    eval_set = load_eval_set(path, tok)
    assert all(t >= 256 for line in eval_set.lines for t in line.ids[1:])  # no byte fallback hit
    model = tiny_model(vocab=tok.vocab_size)
    result = evaluate(model, eval_set, n_resamples=200)
    chars = sum(len(t) for t in texts)
    assert result.n_tokens == chars == result.n_chars
    assert result.bpc == pytest.approx(result.nats_per_token / math.log(2) * result.n_tokens / chars, rel=1e-12)
    assert result.bpc == pytest.approx(math.log2(naive_ppl(model, eval_set.lines)), rel=1e-6)
    n_bytes = sum(len(t.encode()) for t in texts)
    assert n_bytes > chars and result.bpb == pytest.approx(result.bpc * chars / n_bytes, rel=1e-12)


def test_position_mask_scores_only_the_masked_targets():
    rng = np.random.default_rng(4)
    lines = random_lines(rng, [6, 40, 19, 3], pairs_like=True)
    masks = [rng.random(sum(line.is_target)).tolist() for line in lines]
    masks = [[v < 0.5 for v in m] for m in masks]
    masks[0] = [True] * len(masks[0])  # at least one token somewhere
    scores = score_lines(MODEL, lines, token_budget=50, position_mask=masks)
    assert scores.n_tokens.tolist() == [sum(m) for m in masks]
    ppl = math.exp(scores.nll_sum.sum() / scores.n_tokens.sum())
    assert ppl == pytest.approx(naive_ppl(MODEL, lines, masks), rel=1e-6)
    with pytest.raises(ValueError, match="position_mask has"):
        score_lines(MODEL, lines, position_mask=[[True]] * len(lines))


def test_word_masks_follow_the_text_and_exclude_eos(tmp_path):
    tok = CharTokenizer.train(["o gato e a casa", "de um lado"])
    path = tmp_path / "held.jsonl"
    path.write_text(json.dumps({"prompt": "oi", "response": "o gato"}) + "\n", encoding="utf-8")
    eval_set = load_eval_set(path, tok)
    function = target_word_masks(eval_set, tok, WORD_LISTS["function-words"])[0]
    content = target_word_masks(eval_set, tok, WORD_LISTS["content-words"])[0]
    # targets: "o", " ", "g", "a", "t", "o", EOS
    assert function == [True, False, False, False, False, False, False]
    assert content == [False, False, True, True, True, True, False]


def test_evaluate_reports_sums_units_and_recomputable_json():
    lines = random_lines(np.random.default_rng(5), [4, 30, 12], pairs_like=False)
    result = evaluate(MODEL, EvalSet("s", "s.txt", "text", lines), n_resamples=300)
    assert result.ppl == pytest.approx(naive_ppl(MODEL, lines), rel=1e-6)
    assert result.n_tokens == 3 + 29 + 11 and result.n_lines == 3 == result.n_lines_total
    assert result.ci.lo < result.ppl < result.ci.hi
    payload = json.loads(json.dumps(result.to_json()))
    assert len(payload["lines"]["nll_sum"]) == 3
    again = type(result).from_json(payload, n_resamples=300)
    assert again.ppl == result.ppl and again.ci == result.ci


def test_subsample_draws_seeded_lines_and_says_k_of_n():
    lines = random_lines(np.random.default_rng(6), [3] * 166, pairs_like=False)
    full = EvalSet("enRuler", "en.txt", "text", lines)
    part, note = subsample(full, all_lines=False, n_batches=2, batch=8, seed=1337)
    chosen = sample_lines(166, 16, 1337)
    assert note == "16/166 lines, seed 1337" and part.line_index == chosen and part.sample_seed == 1337
    assert part.lines == [lines[i] for i in chosen] and part.n_lines_total == 166
    assert chosen != list(range(16))  # not the first lines
    assert subsample(full, False, 2, 8, seed=1337)[0].line_index == chosen  # same lines at every eval
    assert subsample(full, False, 2, 8, seed=1338)[0].line_index != chosen
    same, note_all = subsample(full, all_lines=True, n_batches=2, batch=8)
    assert same.lines == lines and note_all == "166/166 lines"
    result = evaluate(MODEL, part, n_resamples=200)
    assert result.subsampled and "16/166" in result.warning() and "SE" in result.warning()
    assert result.sample_seed == 1337
    assert evaluate(MODEL, full, n_resamples=200).warning() is None
    with pytest.raises(ValueError, match="batch"):
        subsample(full, all_lines=False, n_batches=2, batch=0)


def _inclusion_is_uniform(sampler, n: int, k: int, seeds: int = 2000) -> bool:
    """Every line is picked with probability k/n (within 5 binomial SE over `seeds` draws)."""
    counts = np.zeros(n)
    for seed in range(seeds):
        picked = sampler(n, k, seed)
        assert len(set(picked)) == k and picked == sorted(picked) and 0 <= min(picked) and max(picked) < n
        counts[picked] += 1
    p = k / n
    return bool(np.all(np.abs(counts / seeds - p) <= 5 * math.sqrt(p * (1 - p) / seeds)))


def test_sample_lines_is_uniform_without_replacement_and_the_check_catches_first_k():
    assert _inclusion_is_uniform(sample_lines, 40, 16)
    assert not _inclusion_is_uniform(lambda n, k, seed: list(range(k)), 40, 16)
    assert sample_lines(10, 10, 3) == sample_lines(10, 50, 3) == list(range(10))


def test_blank_lines_are_counted_not_scored(tmp_path):
    tok = CharTokenizer.train(["abc de"])
    path = tmp_path / "lines.txt"
    path.write_bytes("abc\n\n  \t\n\u00a0\nde\r\n\n".encode())  # the final newline opens no line
    eval_set = load_eval_set(path, tok)
    assert [line.text for line in eval_set.lines] == ["abc", "de"]  # the "\r" is dropped
    assert eval_set.n_blank == 4
    result = evaluate(tiny_model(vocab=tok.vocab_size), eval_set, n_resamples=200)
    assert result.blank_note == "2 scored, 4 blank" and result.to_json()["n_blank"] == 4
    assert type(result).from_json(json.loads(json.dumps(result.to_json())), n_resamples=200).n_blank == 4
    no_blanks = tmp_path / "clean.txt"
    no_blanks.write_text("abc\nde\n")
    assert load_eval_set(no_blanks, tok).n_blank == 0


def test_compare_identical_models_gives_ratio_one_and_other_lines_are_refused():
    lines = random_lines(np.random.default_rng(7), [5, 20, 9, 40, 3, 11], pairs_like=False)
    eval_set = EvalSet("s", "s.txt", "text", lines)
    a = evaluate(MODEL, eval_set, n_resamples=300)
    b = evaluate(copy.deepcopy(MODEL), eval_set, n_resamples=300)
    paired = compare_results(a, b, n_resamples=300)
    assert paired.ratio == pytest.approx(1.0, abs=1e-12) and paired.lo <= 1.0 <= paired.hi
    other = evaluate(MODEL, EvalSet("s", "s.txt", "text", lines[:-1]), n_resamples=300)
    with pytest.raises(ValueError, match="same lines"):
        compare_results(a, other)
    worse = evaluate(tiny_model(seed=9), eval_set, n_resamples=300)
    ratio = compare_results(a, worse, n_resamples=300).ratio
    assert ratio == pytest.approx(worse.ppl / a.ppl, rel=1e-12)


def test_text_set_reader(tmp_path):
    tok = CharTokenizer.train(["abc de"])
    path = tmp_path / "ptVal.txt"
    path.write_text("abc\n\n   \nde\r\n", encoding="utf-8")
    eval_set = load_eval_set(path, tok)
    assert eval_set.name == "ptVal" and eval_set.kind == "text"
    assert [line.text for line in eval_set.lines] == ["abc", "de"]
    assert eval_set.lines[0].ids == [tok.bos_id, *tok.encode("abc")]
    assert eval_set.lines[0].is_target == [False, True, True, True]
    (tmp_path / "bad.txt").write_bytes(b"ok\n\xff\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: not valid UTF-8"):
        load_eval_set(tmp_path / "bad.txt", tok)
    (tmp_path / "blank.txt").write_text("\n \n")
    with pytest.raises(ValueError, match="no lines to score"):
        load_eval_set(tmp_path / "blank.txt", tok)


def test_pairs_set_reader(tmp_path):
    tok = CharTokenizer.train(["pergunta resposta oi ok"])
    path = tmp_path / "sftHeld.jsonl"
    records = [
        {"prompt": "oi", "response": "ok"},
        {"messages": [{"role": "user", "content": "oi"}, {"role": "assistant", "content": "ok"},
                      {"role": "user", "content": "e"}, {"role": "assistant", "content": "sim"}]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")
    eval_set = load_eval_set(path, tok)
    assert eval_set.kind == "pairs" and [line.text for line in eval_set.lines] == ["ok", "oksim"]
    first = eval_set.lines[0]
    assert [t for t, m in zip(first.ids, first.is_target) if m] == [*tok.encode("ok"), tok.eos_id]
    for bad, reason in [
        ('{"prompt": "oi"}', "missing field 'response'"),
        ("not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"messages": [{"role": "user", "content": "x"}]}', "no 'assistant' message"),
        ('{"messages": [{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}]}', "unknown role"),
    ]:
        bad_path = tmp_path / "bad.jsonl"
        bad_path.write_text(json.dumps(records[0]) + "\n" + bad + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=rf"bad.jsonl:2: .*{reason}"):
            load_eval_set(bad_path, tok)


def test_a_scoring_process_warms_vml_before_its_first_forward(monkeypatch):
    """`tatu eval`, compare, interpolate and the sweeps score in processes the daemon's start never
    ran in: their first VML call must be the warm-up's (model/cpu_sums.py warm_vml says why), so
    score_lines warms before the model's first forward, once per thread count."""
    from tatu.model import cpu_sums

    monkeypatch.setattr(cpu_sums, "_WARMED_AT", set())  # as in a process that has scored nothing
    seen = []
    hook = MODEL.register_forward_pre_hook(lambda module, args: seen.append(set(cpu_sums._WARMED_AT)))
    try:
        score_lines(MODEL, random_lines(np.random.default_rng(3), [5, 9], pairs_like=False))
    finally:
        hook.remove()
    assert seen and seen[0] == {max(1, torch.get_num_threads())}

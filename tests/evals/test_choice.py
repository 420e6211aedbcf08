"""Multiple-choice scoring (tatu.evals.choice) against a naive loop written here: each (context,
choice) alone through a float64 copy of the model, its log-likelihood summed by hand; the
McNemar test against scipy's exact binomial test; the Wilson CI against scipy's."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

from tatu.data.manifest import DataError
from tatu.data.task_gen import generate_task, language_task
from tatu.evals.choice import mcnemar_exact, read_task, score_task
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import CharTokenizer


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    items = generate_task("numbers", 6, 0) + generate_task("arith", 6, 1) + generate_task("dates", 4, 2)
    items += language_task(["o gato dorme no sofá", "a casa é grande"], ["the cat sleeps", "a big house"], 4, 3)
    path = tmp_path_factory.mktemp("task") / "mixed.jsonl"
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
    tok = CharTokenizer.train([i["context"] + " " + " ".join(i["choices"]) for i in items])
    torch.manual_seed(5)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=128, n_layer=2, n_head=2, n_embd=32))
    with torch.no_grad():
        model.transformer.wte.weight.mul_(8.0)
    return tok, model, read_task(path), items


def naive_loglik(model64, tok, context: str, choice: str) -> float:
    whole = tok.encode(context + " " + choice)
    n_context = len(tok.encode(context))
    ids = [tok.bos_id, *whole]
    with torch.no_grad():
        logits, _ = model64(torch.tensor([ids[:-1]]))
    logp = torch.log_softmax(logits[0].double(), dim=-1)
    return sum(float(logp[pos - 1, ids[pos]]) for pos in range(1 + n_context, len(ids)))


def test_acc_and_acc_norm_equal_a_naive_loop(world):
    tok, model, items, raw = world
    result = score_task(model, items, tok, "mixed")
    model64 = copy.deepcopy(model).double().eval()
    for i, item in enumerate(raw):
        naive = np.asarray([naive_loglik(model64, tok, item["context"], c) for c in item["choices"]])
        assert result.loglik[i] == pytest.approx(naive, rel=1e-5, abs=1e-5)
        assert result.correct[i] == (int(np.argmax(naive)) == item["answer"])
        lengths = np.asarray([len(c) for c in item["choices"]], dtype=float)
        assert result.correct_norm[i] == (int(np.argmax(naive / lengths)) == item["answer"])
    summary = result.summary()
    assert summary["n"] == len(raw) and summary["acc"]["value"] == pytest.approx(result.correct.mean())
    ci = binomtest(int(result.correct.sum()), len(raw)).proportion_ci(method="wilson")
    assert (summary["acc"]["lo"], summary["acc"]["hi"]) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_generated_items_have_their_answer_among_distinct_choices():
    for kind in ("numbers", "dates", "arith"):
        for item in generate_task(kind, 50, 7):
            assert len(set(item["choices"])) == len(item["choices"]) >= 2
            assert 0 <= item["answer"] < len(item["choices"])
    arith = generate_task("arith", 50, 7)
    for item in arith:
        a, op, b = item["context"].split()[2:5]
        value = int(a) + int(b.rstrip("?")) if op == "mais" else int(a) - int(b.rstrip("?"))
        assert item["choices"][item["answer"]] == str(value)


@pytest.mark.parametrize("seed", range(6))
def test_mcnemar_equals_scipys_exact_binomial_test(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.random(40) < 0.5, rng.random(40) < 0.6
    test = mcnemar_exact(a, b)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    assert (test["only_a"], test["only_b"]) == (only_a, only_b)
    expected = binomtest(min(only_a, only_b), only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
    assert test["p_value"] == pytest.approx(expected, rel=1e-12)
    assert test["diff"] == pytest.approx(b.mean() - a.mean())


def test_a_bad_task_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"context": "x", "choices": ["a", "b"], "answer": 0}\n{"context": "y", "choices": ["a"], "answer": 0}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: 'choices' must be a list of at least 2"):
        read_task(path)


def test_a_task_is_checked_against_the_manifests_sha256_in_the_one_read(tmp_path):
    import hashlib

    path = tmp_path / "task.jsonl"
    path.write_text('{"context": "x", "choices": ["a", "b"], "answer": 1}\n')
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert [item.answer for item in read_task(path, digest)] == [1]
    path.write_text('{"context": "x", "choices": ["a", "b"], "answer": 0}\n')  # edited after the build
    with pytest.raises(DataError, match=r"task.jsonl: its sha256 is not the manifest's"):
        read_task(path, digest)
    path.unlink()
    with pytest.raises(DataError, match=r"task.jsonl: cannot read the task"):
        read_task(path, digest)  # a missing file is bad data (65), not a crash

"""tatu.evals.answers: batched greedy answers with the KV cache == a naive loop, one prompt at a
time, recomputing the whole sequence each token; right only when the response ended and equals
the answer once normalised."""
from __future__ import annotations

import random

import pytest
import torch

from tatu.data.answers import AnswerItem, normalize_answer
from tatu.evals import answers as answers_module
from tatu.evals.answers import SLACK_TOKENS, answer_budget, score_answers
from tatu.model.chat import encode_prompt
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import CharTokenizer

ALPHABET = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ.?"


def lively(tok, seed: int, block_size: int = 96) -> GPT:
    """A random tiny model whose greedy output varies (weights scaled up), its output head untied
    (so end_at can make EOS fire without changing any input embedding) and kept to ALPHABET's
    characters and EOS (so a response's text encodes back to its own tokens)."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=block_size, n_layer=2, n_head=2, n_embd=32)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(6)
        head = torch.nn.Linear(32, tok.vocab_size)
        head.weight.copy_(model.lm_head.weight)
        allowed = {tok.eos_id, *(t for c in ALPHABET for t in tok.encode(c))}
        head.bias.copy_(torch.tensor([0.0 if t in allowed else -1e4 for t in range(tok.vocab_size)]))
        model.lm_head = head
    return model


def end_at(model, tok, prompts: list[str], budget: int) -> None:
    """Give EOS a slightly longer copy of the output row of the token that ends the free-running
    responses at the most different lengths while some never meet it: EOS then wins wherever that
    token would have been emitted, so responses end at varied lengths and some run to the budget."""
    free = model.generate([encode_prompt(tok, p) for p in prompts], budget)

    def spread(token):
        stops = [o.index(token) for o in free if token in o]
        return (len(set(stops)), -abs(len(free) - len(stops) - 4)) if len(free) - len(stops) >= 3 else (-1, 0)

    token = max(sorted({t for o in free for t in o}), key=spread)
    with torch.no_grad():
        model.lm_head.weight[tok.eos_id] = model.lm_head.weight[token] * 1.05


def naive_answer(model, tok, prompt: str, budget: int) -> tuple[str, bool]:
    """(response, ended) recomputing the whole sequence for every new token."""
    seq, out = encode_prompt(tok, prompt), []
    room = min(budget, model.config.block_size - len(seq))
    with torch.no_grad():
        while len(out) < room:
            token = int(model(torch.tensor([seq + out]))[0][0, -1].argmax())
            if token == tok.eos_id:
                return tok.decode(out), True
            out.append(token)
    return tok.decode(out), False


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batched_answers_equal_a_naive_loop_and_are_scored_as_it_scores_them(seed, monkeypatch):
    monkeypatch.setattr(answers_module, "ANSWER_BATCH", 5)  # several batches, the last one short
    tok = CharTokenizer.train([ALPHABET])
    model = lively(tok, seed)
    rng = random.Random(seed)
    prompts = ["".join(rng.choice(ALPHABET[:27]) for _ in range(rng.randint(1, 30))) for _ in range(17)]
    long_answer = "x" * 40  # fixes the budget: every other answer is shorter
    budget = 40 + SLACK_TOKENS
    end_at(model, tok, prompts, budget)
    naive = [naive_answer(model, tok, p, budget) for p in prompts]
    assert 3 <= sum(ended for _, ended in naive) <= 15, "the model should end some responses and not others"
    items, expected = [AnswerItem(1, prompts[0], long_answer)], [False]
    for number, (prompt, (text, ended)) in enumerate(zip(prompts[1:], naive[1:]), start=2):
        # the answer, dressed as the normal form forgives: case, spaces, a final "."
        dressed = f"  {text.upper()}. "
        if ended and normalize_answer(text) and len(tok.encode(dressed)) <= 40 and rng.random() < 0.7:
            items.append(AnswerItem(number, prompt, dressed))
            expected.append(True)
        else:
            items.append(AnswerItem(number, prompt, "nao" if text != "nao" else "sim"))
            expected.append(False)
    # a response that had not ended is wrong even when its start is the answer
    unfinished = next(i for i, (_, ended) in enumerate(naive) if not ended and i > 0)
    items[unfinished] = AnswerItem(items[unfinished].line, prompts[unfinished], naive[unfinished][0][:5] or "a")
    expected[unfinished] = False
    assert answer_budget(tok, items) == budget

    result = score_answers(model, items, tok, "held")
    assert result.outputs == [text for text, _ in naive]
    assert result.finished.tolist() == [ended for _, ended in naive]
    assert result.correct.tolist() == expected
    assert 2 <= sum(expected) < len(expected) - 2  # both decisions exercised
    naive_right = [ended and normalize_answer(text) == normalize_answer(item.answer)
                   for (text, ended), item in zip(naive, items)]
    assert result.correct.tolist() == naive_right
    assert result.rate().n_correct == sum(expected) and result.n_unfinished == sum(not e for _, e in naive)


def test_a_prompt_that_fills_the_context_gets_no_response_and_is_wrong():
    tok = CharTokenizer.train([ALPHABET])
    model = lively(tok, 0, block_size=16)
    items = [AnswerItem(1, "a" * 20, "a"), AnswerItem(2, "ab", "b")]
    result = score_answers(model, items, tok)
    assert result.outputs[0] == "" and not result.finished[0] and not result.correct[0]
    assert result.outputs[1] == naive_answer(model, tok, "ab", answer_budget(tok, items))[0]
    with pytest.raises(ValueError, match="no items"):
        score_answers(model, [], tok)


def test_a_response_still_going_at_its_budget_is_wrong_even_when_it_spells_the_answer(monkeypatch):
    """With no slack, a response cut at the budget can equal an answer as long as the budget: it had
    not stopped (the model would have gone on), so it is wrong; a text that ended is right."""
    monkeypatch.setattr(answers_module, "SLACK_TOKENS", 0)
    tok = CharTokenizer.train([ALPHABET])
    budget = 16
    model = lively(tok, 1)
    rng = random.Random(1)
    prompts = ["".join(rng.choice(ALPHABET[:27]) for _ in range(rng.randint(1, 30))) for _ in range(17)]
    end_at(model, tok, prompts, budget)
    naive = [naive_answer(model, tok, p, budget) for p in prompts]
    fits = [normalize_answer(text) and len(tok.encode(text)) <= budget for text, _ in naive]
    going = next(i for i, (_, ended) in enumerate(naive) if not ended and fits[i])
    ended = next(i for i, (_, ended) in enumerate(naive) if ended and fits[i])
    items = [AnswerItem(1, "x", "x" * budget),  # fixes the budget
             AnswerItem(2, prompts[going], naive[going][0]), AnswerItem(3, prompts[ended], naive[ended][0])]
    assert answer_budget(tok, items) == budget
    result = score_answers(model, items, tok)
    assert result.outputs[1:] == [naive[going][0], naive[ended][0]]
    assert result.finished.tolist()[1:] == [False, True] and result.correct.tolist()[1:] == [False, True]

"""Answers right: every held-out pair with a checkable answer (tatu.data.answers) asked of the model,
its greedy response scored by exact match against the answer.

Each prompt is laid out as training lays it out (`BOS <|user|> prompt <|assistant|>`,
tatu.model.chat.encode_prompt) and continued greedily with the KV cache, ANSWER_BATCH prompts per
batch (tatu.model.gpt.GPT.generate: a row's output equals generating it alone, so batching and
order change nothing). The response is what comes before EOS. It is right when it ENDED (EOS) within
its budget and its normal form equals the answer's. The budget is the longest answer's tokens plus
SLACK_TOKENS (room for a final "." or closing quote the normal form drops), so the cost follows the
answers, not TATU_GEN_TOKENS; a response still going at the budget is wrong whatever its start (it
had not stopped: "42" followed by more is not the answer 42), and counted as `unfinished`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tatu.data.answers import AnswerItem, normalize_answer
from tatu.evals.exact import RunRate, run_rate
from tatu.model.chat import encode_prompt
from tatu.model.tokenizer import Tokenizer

ANSWER_BATCH = 64  # prompts per generate call: bounds the KV cache (batch x layers x context)
SLACK_TOKENS = 4


@dataclass
class AnswerResult:
    """One set's answers at one checkpoint, in the file's order."""

    name: str
    outputs: list[str]  # each greedy response, as decoded
    correct: np.ndarray  # bool per item
    finished: np.ndarray  # bool per item: it ended (EOS) within its budget

    def rate(self) -> RunRate:
        return run_rate(self.correct)

    @property
    def n_unfinished(self) -> int:
        return int((~self.finished).sum())


def answer_budget(tokenizer: Tokenizer, items: list[AnswerItem]) -> int:
    """New tokens each response may take: the longest answer's plus SLACK_TOKENS."""
    return max(len(tokenizer.encode(item.answer)) for item in items) + SLACK_TOKENS


def score_answers(model, items: list[AnswerItem], tokenizer: Tokenizer, name: str = "answers") -> AnswerResult:
    """Every item's greedy response and whether it is the answer (module doc). The model is used
    as it is (the caller puts it in eval mode); a prompt that fills the model's context gets no
    response and is wrong."""
    if not items:
        raise ValueError(f"{name}: no items with answers to score")
    prompts = [encode_prompt(tokenizer, item.prompt) for item in items]
    budget = answer_budget(tokenizer, items)
    block_size = model.config.block_size
    outputs, finished = [""] * len(items), np.zeros(len(items), dtype=bool)
    # similar prompt lengths share a batch: less left padding to attend over
    order = sorted((i for i in range(len(items)) if len(prompts[i]) < block_size), key=lambda i: len(prompts[i]))
    for start in range(0, len(order), ANSWER_BATCH):
        rows = order[start:start + ANSWER_BATCH]
        generated = model.generate([prompts[i] for i in rows], budget, eos_id=tokenizer.eos_id)
        for i, tokens in zip(rows, generated):
            room = min(budget, block_size - len(prompts[i]))
            outputs[i] = tokenizer.decode(tokens)
            finished[i] = len(tokens) < room  # EOS came before the budget filled
    correct = np.array([done and normalize_answer(text) == normalize_answer(item.answer)
                        for text, done, item in zip(outputs, finished, items)], dtype=bool)
    return AnswerResult(name, outputs, correct, finished)

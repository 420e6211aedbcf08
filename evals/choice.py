"""Multiple-choice tasks scored by log-likelihood, the way lm-evaluation-harness scores its
`multiple_choice` tasks.

A task is a JSONL file, one item per line: {"context": str, "choices": [str, ...], "answer": i}.
Each choice is a continuation of the context: the request is (context, " " + choice) — lm-eval's
default target delimiter — with any whitespace ending the context moved into the continuation,
and the continuation's tokens are those of encode(context + continuation) after the tokens of
encode(context) (as lm-eval's HF model forms them). Its log-likelihood is the sum of the log
probabilities of those tokens, after BOS and the context; a request longer than the model's context keeps its last
block_size + 1 tokens (the context loses its start, as lm-eval's HF model truncates it). Then,
per item:

    acc       1 if the choice with the highest log-likelihood is the answer
    acc_norm  1 if the choice with the highest log-likelihood / len(choice) is the answer
              (lm-eval divides by the choice's length in characters; bytes for ASCII text)

Ties go to the first choice (numpy's argmax, as lm-eval). Accuracy comes with a Wilson 95%
interval over items; two checkpoints are compared over the same items with an exact McNemar
test on the items one gets right and the other wrong. The choices of many items are scored in
the same batched forwards (tatu.evals.scoring.score_lines).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tatu.data.tasks import read_items
from tatu.evals.downstream import wilson_interval
from tatu.evals.line_scores import score_lines
from tatu.evals.sets import EvalLine
from tatu.model.tokenizer import Tokenizer

TARGET_DELIMITER = " "


@dataclass(frozen=True)
class ChoiceItem:
    line: int
    context: str
    choices: tuple[str, ...]
    answer: int


def read_task(path: str | Path, sha256: str | None = None) -> list[ChoiceItem]:
    """The items of a task file (tatu.data.tasks' rule; a bad line is FILE:LINE, exit 65), checked
    against the manifest's `sha256` when given."""
    return [ChoiceItem(number, p["context"], tuple(p["choices"]), p["answer"]) for number, p in read_items(path, sha256)]


def request(tokenizer: Tokenizer, context: str, choice: str) -> EvalLine:
    """The scored line of one (context, choice): BOS + context, the continuation's tokens the targets."""
    continuation = TARGET_DELIMITER + choice
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole = tokenizer.encode(context + continuation)
    n_context = len(tokenizer.encode(context))
    if n_context >= len(whole):
        raise ValueError(f"choice {choice!r} adds no token to its context")
    ids = [tokenizer.bos_id, *whole]
    return EvalLine(ids, [False] * (1 + n_context) + [True] * (len(whole) - n_context), continuation)


@dataclass
class TaskResult:
    name: str
    loglik: list[np.ndarray]  # per item, per choice
    answers: np.ndarray
    correct: np.ndarray  # bool per item (acc)
    correct_norm: np.ndarray  # bool per item (acc_norm)

    def summary(self) -> dict:
        n = len(self.answers)
        out = {"n": n}
        for key, hits in (("acc", self.correct), ("acc_norm", self.correct_norm)):
            lo, hi = wilson_interval(int(hits.sum()), n)
            out[key] = {"value": float(hits.mean()), "lo": lo, "hi": hi}
        return out


def score_task(model, items: list[ChoiceItem], tokenizer: Tokenizer, name: str = "task", device="cpu",
               map_batches=None) -> TaskResult:
    """Every choice of every item scored in shared batches; acc and acc_norm per item."""
    lines, owners = [], []
    keep = model.config.block_size + 1
    for i, item in enumerate(items):
        for choice in item.choices:
            line = request(tokenizer, item.context, choice)
            if len(line.ids) > keep:  # as lm-eval: the context loses its first tokens, never the choice
                line = EvalLine(line.ids[-keep:], [False] + line.is_target[-keep + 1:], line.text)
            lines.append(line)
            owners.append(i)
    scores = score_lines(model, lines, device, map_batches=map_batches)
    loglik = [[] for _ in items]
    for i, nll in zip(owners, scores.nll_sum):
        loglik[i].append(-float(nll))
    loglik = [np.asarray(ll) for ll in loglik]
    answers = np.asarray([item.answer for item in items])
    lengths = [np.asarray([float(len(c)) for c in item.choices]) for item in items]
    correct = np.asarray([int(np.argmax(ll)) == a for ll, a in zip(loglik, answers)])
    correct_norm = np.asarray([int(np.argmax(ll / n)) == a for ll, n, a in zip(loglik, lengths, answers)])
    return TaskResult(name, loglik, answers, correct, correct_norm)


def mcnemar_exact(a_correct: np.ndarray, b_correct: np.ndarray) -> dict:
    """Exact McNemar test of two checkpoints on the same items: b = items only A gets right,
    c = items only B gets right; p = P(a binomial(b + c, 1/2) is as far from even), two-sided."""
    a_correct, b_correct = np.asarray(a_correct, bool), np.asarray(b_correct, bool)
    if a_correct.shape != b_correct.shape:
        raise ValueError("mcnemar_exact: the two results are not over the same items")
    only_a, only_b = int((a_correct & ~b_correct).sum()), int((~a_correct & b_correct).sum())
    n = only_a + only_b
    k = min(only_a, only_b)
    p = 1.0 if n == 0 else min(1.0, 2.0 * sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n)
    return {"only_a": only_a, "only_b": only_b, "p_value": p,
            "diff": float(b_correct.mean() - a_correct.mean())}

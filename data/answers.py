"""A pair's checkable answer: the `answer` field of a prompt/response line, and the one normal form
an answer and a model's greedy response are compared in (docs/data.md#pairs-with-a-checkable-answer).

    {"prompt": "Escreva 42 por extenso.", "response": "quarenta e dois", "answer": "quarenta e dois"}

The normal form, in the terms of lm-evaluation-harness's `exact_match` options:
  - Unicode NFC first (a composed and a decomposed "ã" are the same answer);
  - `ignore_case`: case-folded (Python's casefold: lm-eval's lower() plus "ß" = "ss");
  - whitespace: every run of whitespace becomes one space, and the ends are stripped (lm-eval
    has no such option: its `regexes_to_ignore` can only delete, never collapse);
  - like a `regexes_to_ignore` of the ends only: quotes around the answer and punctuation that
    ends it (. , ; : ! ? …) are peeled, repeatedly, so '"42."' and '42".' are both "42";
  - NOT `ignore_punctuation`: punctuation inside is kept ("segunda-feira", "3.14", "1,5"), where
    lm-eval's option would delete every ASCII punctuation mark and join "segunda-feira" with
    "segundafeira".
tests/evals/test_downstream.py checks the rule against lm-eval's own exact_match on the inputs both
can express.

Torch-free and import-free of the rest of tatu: the data build validates answers with it and the
evals score with it.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

ANSWER_FIELD = "answer"
_WHITESPACE = re.compile(r"\s+")
QUOTES = "\"'`“”‘’«»„‚‹›"
TRAILING_PUNCTUATION = ".,;:!?…"


def normalize_answer(answer: str) -> str:
    """NFC, case-folded, whitespace collapsed, without surrounding quotes or final punctuation.

    '  "Quarenta e DOIS." ' -> 'quarenta e dois'.
    """
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a str, got {type(answer).__name__}")
    text = _WHITESPACE.sub(" ", unicodedata.normalize("NFC", answer).casefold()).strip()
    while True:
        peeled = text.rstrip(TRAILING_PUNCTUATION + QUOTES).lstrip(QUOTES).strip()
        if peeled == text:
            return text
        text = peeled


def answer_problem(value) -> str | None:
    """Why `value` cannot be a pair's answer (None when it can): a string whose normal form is not
    empty (an answer of quotes and dots would match an empty response)."""
    if not isinstance(value, str):
        return f"field {ANSWER_FIELD!r} is {type(value).__name__}, expected a string"
    if not normalize_answer(value):
        return (f"field {ANSWER_FIELD!r} is {value!r}, empty once normalised (case, spaces, surrounding quotes "
                f"and final punctuation dropped): nothing to check a response against")
    return None


@dataclass(frozen=True)
class AnswerItem:
    """One held-out pair whose answer can be checked: its line in the file, what the model is
    asked, and the answer its greedy response must equal once normalised."""

    line: int  # 1-based, in the eval file
    prompt: str
    answer: str


def answer_items(examples, path) -> list[AnswerItem]:
    """The answers of an eval set's pairs (tatu.data.sft examples: .line, .prompt, .answer), in file
    order: every pair's, or [] when none is marked. A set that marks some pairs and not others is
    refused (ValueError "FILE:LINE: reason" at the first line that breaks line 1's pattern): its
    rate would silently be over a subset of the held-out pairs."""
    examples = list(examples)
    marked = [e for e in examples if e.answer is not None]
    if not marked:
        return []
    unmarked = [e for e in examples if e.answer is None]
    if unmarked:
        first_marked, first_unmarked = marked[0], unmarked[0]
        if first_marked.line < first_unmarked.line:
            raise ValueError(f"{path}:{first_unmarked.line}: no {ANSWER_FIELD!r} field, while line {first_marked.line} "
                             f"has one: an eval set's pairs carry an answer on every line or on none")
        raise ValueError(f"{path}:{first_marked.line}: an {ANSWER_FIELD!r} field, while line {first_unmarked.line} has "
                         f"none: an eval set's pairs carry an answer on every line or on none")
    return [AnswerItem(e.line, e.prompt, e.answer) for e in examples]

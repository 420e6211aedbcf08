"""The dataset of the tatu_rolling lm-eval task: a tatu text eval set, one document per scored line.

Lines are read by tatu.evals.sets' own rule (split on "\\n", a trailing "\\r" dropped, blank lines
skipped), so lm-eval scores exactly the texts `tatu eval` scores, in the same order.
"""
from __future__ import annotations

from pathlib import Path


def load_set(tatu_set: str | None = None, **_other_metadata):
    import datasets

    from tatu.evals.sets import _text_lines

    if not tatu_set:
        raise ValueError("tatu_rolling: give the eval set file as metadata: --metadata '{\"tatu_set\": \"FILE\"}'")
    path = Path(tatu_set)
    if path.suffix.lower() in (".jsonl", ".json"):
        raise ValueError(f"{path}: pairs are scored conditionally on their prompts; loglikelihood_rolling "
                         "scores whole documents, so only text eval sets fit this task")
    numbered, _n_blank = _text_lines(path)
    if not numbered:
        raise ValueError(f"{path}: no lines to score (the file is empty or blank)")
    rows = {"text": [line for _, line in numbered], "line": [number for number, _ in numbered]}
    return datasets.DatasetDict({"test": datasets.Dataset.from_dict(rows)})


def load_choice(tatu_task: str | None = None, **_other_metadata):
    """The dataset of the tatu_choice task: the items of a tatu multiple-choice task, in order,
    read by tatu.evals.choice's own rule."""
    import datasets

    from tatu.evals.choice import read_task

    if not tatu_task:
        raise ValueError("tatu_choice: give the task file as metadata: --metadata '{\"tatu_task\": \"FILE\"}'")
    items = read_task(tatu_task)
    rows = {"context": [i.context for i in items], "choices": [list(i.choices) for i in items],
            "answer": [i.answer for i in items]}
    return datasets.DatasetDict({"test": datasets.Dataset.from_dict(rows)})

"""Generated multiple-choice tasks with checkable answers (tatu.evals.choice's JSONL format).

    numbers   similarity: which choice writes the number in words ("37" -> "trinta e sete")
    dates     similarity: which choice writes the same date ("12/03/2021" -> "12 de março de 2021")
    arith     arithmetic: the sum or difference of two numbers
    language  classification: is this line Portuguese or English (lines given by the caller,
              e.g. the demo's held-out eval lines, so the answer is known from their file)
    source    classification: which source a line comes from (the Debian FAQ or the Portuguese
              validation text)

The distractors are near misses (a neighbouring number, another month), so the task measures
the model, not the format. Deterministic for (kind, n, seed).
"""
from __future__ import annotations

import datetime as dt
import random

from tatu.data.sft_gen import MONTHS, number_to_words

TASKS = ("numbers", "dates", "arith")


def _shuffled(rng: random.Random, right: str, wrong: list[str]) -> dict:
    choices = [right, *dict.fromkeys(w for w in wrong if w != right)]
    rng.shuffle(choices)
    return {"choices": choices, "answer": choices.index(right)}


def _numbers(rng: random.Random) -> dict:
    n = rng.randint(11, 999)
    wrong = [number_to_words(m) for m in (n + 1, n - 1, n + 10, n + 100 if n < 900 else n - 100)]
    return {"context": f"O número {n} por extenso é", **_shuffled(rng, number_to_words(n), wrong)}


def _dates(rng: random.Random) -> dict:
    day = dt.date(2000, 1, 1) + dt.timedelta(days=rng.randrange(10_000))
    words = f"{day.day} de {MONTHS[day.month - 1]} de {day.year}"
    wrong = [f"{day.day} de {MONTHS[(day.month + k) % 12]} de {day.year}" for k in (0, 1, 5)]
    wrong += [f"{day.day} de {MONTHS[day.month - 1]} de {day.year + 1}"]
    return {"context": f"A data {day:%d/%m/%Y} escrita por extenso é", **_shuffled(rng, words, wrong[1:])}


def _arith(rng: random.Random) -> dict:
    a, b = rng.randint(2, 60), rng.randint(2, 40)
    plus = rng.random() < 0.5
    value = a + b if plus else a - b
    wrong = [str(value + d) for d in (1, -1, 10)]
    return {"context": f"Quanto é {a} {'mais' if plus else 'menos'} {b}? Resposta:", **_shuffled(rng, str(value), wrong)}


def generate_task(kind: str, n: int, seed: int) -> list[dict]:
    """`n` items of one of TASKS, distinct contexts."""
    make = {"numbers": _numbers, "dates": _dates, "arith": _arith}[kind]
    rng = random.Random(f"{seed}:{kind}")
    items, seen = [], set()
    while len(items) < n:
        item = make(rng)
        if item["context"] not in seen:
            seen.add(item["context"])
            items.append(item)
    return items


def two_way_task(lines: dict[str, list[str]], question: str, n: int, seed: str) -> list[dict]:
    """Which of two labels a line belongs to (the dict's keys, the lines it knows them by):
    `n` items, half from each list, the answer known from the list a line came from."""
    rng = random.Random(seed)
    (label_a, lines_a), (label_b, lines_b) = lines.items()
    picked = [(line, label_a) for line in rng.sample(lines_a, min(n // 2, len(lines_a)))]
    picked += [(line, label_b) for line in rng.sample(lines_b, min(n - len(picked), len(lines_b)))]
    rng.shuffle(picked)
    choices = [label_a, label_b]
    return [{"context": f"Frase: {line}\n{question}", "choices": choices, "answer": choices.index(label)}
            for line, label in picked]


def language_task(pt_lines: list[str], en_lines: list[str], n: int, seed: int) -> list[dict]:
    """Is this line Portuguese or English."""
    return two_way_task({"português": pt_lines, "inglês": en_lines}, "Língua da frase:", n, f"{seed}:language")


def source_task(faq_lines: list[str], other_lines: list[str], n: int, seed: int) -> list[dict]:
    """Which source a line comes from: the Debian FAQ (the demo's held-out domain) or the
    Portuguese validation text (the Foca guide and fortunes)."""
    return two_way_task({"FAQ do Debian": faq_lines, "guia ou provérbio": other_lines}, "Fonte da frase:", n,
                        f"{seed}:source")

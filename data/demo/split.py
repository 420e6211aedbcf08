"""The demo's train/eval split: eval lines only from held-out documents, and any eval line that
still occurs in the training text dropped (the sources repeat themselves), deterministic for
the seed; and the held-out domain's lines (the FAQ), seeded too."""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from tatu.data.demo.text import SourceText, faq_documents


def _normalize(text: str) -> str:
    return " ".join(text.split())


def eval_candidates(document: str, min_chars: int, max_chars: int) -> list[str]:
    """One-line eval texts from a document: the whole of it if short enough, else sentences."""
    flat = _normalize(document)
    if min_chars <= len(flat) <= max_chars:
        return [flat]
    sentences = re.split(r"(?<=[.!?])\s+(?=[\"'(¿¡]?[A-ZÀ-Ý0-9])", flat)
    return [s for s in sentences if min_chars <= len(s) <= max_chars]


def held_out_lines(faq_lines, n_lines: int, rng: random.Random, min_chars: int, max_chars: int) -> list[str]:
    """`n_lines` one-line texts of the FAQ (its decoded lines), from its paragraphs in seeded order."""
    documents = faq_documents(list(faq_lines))
    rng.shuffle(documents)
    out, seen = [], set()
    for document in documents:
        for line in eval_candidates(document, min_chars, max_chars):
            if line not in seen and len(out) < n_lines:
                seen.add(line)
                out.append(line)
    return out


@dataclass
class Split:
    train: list[str]  # documents, in seeded shuffled order
    eval_lines: list[str]
    train_documents_by_path: dict[str, int]
    eval_requested: int
    eval_dropped_as_in_train: int
    documents_available: int
    duplicate_documents: int


def split_documents(sources: list[SourceText], n_eval: int, max_train_chars: int,
                    rng: random.Random, min_chars: int, max_chars: int) -> Split:
    """Dedupe documents, hold some out for `n_eval` eval lines, fill training up to a size."""
    seen: set[str] = set()
    documents: list[tuple[str, str]] = []  # (path, text)
    duplicates = 0
    for source in sources:
        for text in source.documents:
            key = _normalize(text).lower()
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            documents.append((source.path, text))
    order = list(range(len(documents)))
    rng.shuffle(order)

    # Held-out documents give more candidates than needed: some are dropped below.
    wanted = n_eval + n_eval // 2 + 10
    candidates: list[str] = []
    candidate_set: set[str] = set()
    position = 0
    while position < len(order) and len(candidates) < wanted:
        for line in eval_candidates(documents[order[position]][1], min_chars, max_chars):
            if line not in candidate_set:
                candidate_set.add(line)
                candidates.append(line)
        position += 1

    train: list[str] = []
    by_path: dict[str, int] = {}
    chars = 0
    for index in order[position:]:
        path, text = documents[index]
        # the file is the documents joined by blank lines plus a final newline
        if chars + len(text) + 1 > max_train_chars:
            continue  # a shorter document further on may still fit
        train.append(text)
        by_path[path] = by_path.get(path, 0) + 1
        chars += len(text) + 2

    train_text = "\n".join(_normalize(text) for text in train)
    kept = [line for line in candidates if line not in train_text]
    return Split(train=train, eval_lines=kept[:n_eval], train_documents_by_path=by_path,
                 eval_requested=n_eval, eval_dropped_as_in_train=len(candidates) - len(kept),
                 documents_available=len(documents), duplicate_documents=duplicates)

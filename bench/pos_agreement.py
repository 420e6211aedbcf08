"""How often Apertium's categories (tatu.data.tags, as `tatu data build` stores them) agree with
a hand-labelled sample: tests/fixtures/pos/pt.txt (Portuguese, apertium-por-cat) and en.txt
(English, apertium-eng-spa), about 50 sentences each, labelled word by word.

    .venv/bin/python bench/pos_agreement.py [--verbose]

Prints, per language, the words that agree / all words, per hand label too, and the tagger's
throughput; --verbose lists every disagreement.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path

from tatu.data.tags import tag_texts, tagger_problem
from tatu.evals.categories import word_categories

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "pos"
LABELS = {"N": "noun", "P": "proper", "V": "verb", "A": "adjective", "R": "adverb", "F": "function", "D": "number"}


def read_labelled(path: Path) -> list[tuple[str, list[str]]]:
    """(sentence, the hand label of each of its words) per non-comment line."""
    out = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        labels = [LABELS[m] for m in re.findall(r"\|([A-Z])", raw)]
        out.append((re.sub(r"\|[A-Z]", "", raw), labels))
    return out


def agreement(path: Path, language: str) -> dict:
    """{"agree", "words", "by_label": {label: [agree, words]}, "disagreements", "seconds"}."""
    labelled = read_labelled(path)
    started = time.perf_counter()
    units = tag_texts([s for s, _ in labelled], language)
    seconds = time.perf_counter() - started
    agree, words, by_label, wrong = 0, 0, {}, []
    for (sentence, labels), line_units in zip(labelled, units):
        found = word_categories(sentence, line_units)
        if len(found) != len(labels):
            raise ValueError(f"{path}: {sentence!r} has {len(found)} words but {len(labels)} labels")
        for (word, category), label in zip(found, labels):
            hit = category == label
            agree += hit
            words += 1
            counts = by_label.setdefault(label, [0, 0])
            counts[0] += hit
            counts[1] += 1
            if not hit:
                wrong.append((word, label, category))
    return {"agree": agree, "words": words, "sentences": len(labelled), "by_label": by_label,
            "disagreements": wrong, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    for language, name in (("por", "pt.txt"), ("eng", "en.txt")):
        problem = tagger_problem(language)
        if problem:
            print(problem, file=sys.stderr)
            return 1
        result = agreement(FIXTURES / name, language)
        print(f"{name}: {result['agree']}/{result['words']} words agree ({result['agree'] / result['words']:.1%}), "
              f"{result['sentences']} sentences, tagged in {result['seconds']:.2f}s")
        print("  by hand label: " + ", ".join(f"{label} {a}/{n}" for label, (a, n) in sorted(result["by_label"].items())))
        confusions = Counter((label, category) for _, label, category in result["disagreements"])
        print("  most common disagreements (hand -> Apertium): "
              + ", ".join(f"{a} -> {b} x{n}" for (a, b), n in confusions.most_common(5)))
        if args.verbose:
            for word, label, category in result["disagreements"]:
                print(f"    {word}: {label} vs {category}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The README says of the demo's results only what the demo printed (issue 43): its closing output
is a block of the shape `make demo` prints, asking the demo's own question; every quote (a `>`
block) is a run of whole sentences of that output's `what it says` paragraph (the sentences
sweep/report/prose.py writes from the report's numbers); at least one quote is on the first screen; and
no signed percentage or CI, a result, stands in the README's own prose outside that output and
its quotes. The block itself is regenerated from a real `make demo` (the README names the
command); this checks that what the README's prose says is a copy of it, never its own reading."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tatu.ops.demo import SCALES, WHAT_IT_SAYS, sweep_plan

README = Path(__file__).resolve().parents[1] / "README.md"
FIRST_SCREEN = 60  # lines: what tatu is, the two commands and the demo's answer must fit in them
# a result: a signed percentage (+14.3%, -3.8%) or a CI's bracket ([+12.5%,+16.1%])
RESULT = re.compile(r"(?<![\w.])[+-]\d+(?:\.\d+)?%|\[[+-]?\d+(?:\.\d+)?%,")


def fenced_blocks(text: str) -> list[list[str]]:
    """The lines of every ``` block."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of everything outside ``` blocks, quotes included."""
    out, inside = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            out.append((n, line))
    return out


def quotes(text: str) -> list[tuple[int, str]]:
    """(first line, text) of every quoted paragraph: consecutive `>` lines, split at a bare `>`,
    joined with single spaces as a renderer would."""
    found, lines, start = [], [], 0
    for n, line in [*prose_lines(text), (0, "")]:
        body = line[1:].strip() if line.startswith(">") else None
        if body:
            start = start or n
            lines.append(body)
        elif lines:
            found.append((start, " ".join(lines)))
            lines, start = [], 0
    return found


def closing_block(text: str) -> list[str]:
    (block,) = [b for b in fenced_blocks(text) if b and b[0].startswith("=== done in ")]
    return block


def printed_paragraph(block: list[str]) -> str:
    """The `what it says` paragraph of a closing block, unwrapped (ops/demo.py wraps each sentence)."""
    start = block.index(WHAT_IT_SAYS) + 1
    end = block.index("", start) if "" in block[start:] else len(block)
    return " ".join(block[start:end])


def demo_question() -> str:
    plan = sweep_plan(SCALES["demo"], {"TATU_DEVICE": "cpu", "TATU_PRECISION": "fp32"})
    return tomllib.loads(plan)["question"]


def problems(text: str) -> list[str]:
    """Every way the README's text departs from what the demo printed; [] when it does not."""
    found = []
    block = closing_block(text)
    if not (block[1].startswith("machine: ") and block[2] == demo_question()
            and any(line.startswith("VERDICT (locked rule): ") for line in block)):
        found.append("the closing block is not the demo's output: '=== done in', 'machine:', the demo's question, a VERDICT")
    said = printed_paragraph(block)
    if not said:
        found.append("the closing block has no `what it says` paragraph")
    quoted = quotes(text)
    if not any(n <= FIRST_SCREEN for n, _ in quoted):
        found.append(f"no quote of the demo's answer in the first {FIRST_SCREEN} lines")
    for n, quote in quoted:
        at = said.find(quote)
        whole = at >= 0 and (at == 0 or said[at - 2:at] == ". ") and quote.endswith(".")
        if not whole:
            found.append(f"README.md:{n}: not a run of whole sentences the demo printed: {quote!r}")
    quote_lines = {n for n, line in prose_lines(text) if line.startswith(">")}
    for n, line in prose_lines(text):
        if n not in quote_lines and RESULT.search(line):
            found.append(f"README.md:{n}: a result in the README's own words (quote the demo instead): {line.strip()!r}")
    return found


def test_the_readme_says_of_the_results_only_what_the_demo_printed():
    assert problems(README.read_text(encoding="utf-8")) == []


def test_the_readme_quotes_a_result_with_its_ci():
    """Not only the verdict: at least one quoted sentence carries a number and its CI."""
    assert any(RESULT.search(quote) for _, quote in quotes(README.read_text(encoding="utf-8")))


# The check against edits a hand could make: each one found, on the README's own text.

def edited(old: str, new: str) -> str:
    text = README.read_text(encoding="utf-8")
    assert old in text, old
    return text.replace(old, new, 1)


def test_a_quote_with_a_word_of_direction_changed_is_found():
    text = README.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith(">") and re.search(r"\b(rose|fell)\b", line))
    word = re.search(r"\b(rose|fell)\b", line)[0]
    changed = line.replace(word, {"rose": "fell", "fell": "rose"}[word], 1)
    assert any("not a run of whole sentences" in p for p in problems(text.replace(line, changed, 1)))


def test_a_quote_cut_mid_sentence_is_found():
    text = README.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("> ") and line.rstrip().endswith("."))
    assert any("not a run of whole sentences" in p for p in problems(text.replace(line, line.rstrip()[:-1], 1)))


def test_a_result_in_the_readmes_own_words_is_found():
    text = edited("## Words\n", "## Words\n\nWith replay the ruler's English got better (-3.8%).\n")
    assert any("a result in the README's own words" in p for p in problems(text))
    text = edited("## Words\n", "## Words\n\nThe ruler moved [+12.5%,+16.1%] without replay.\n")
    assert any("a result in the README's own words" in p for p in problems(text))


def test_a_first_screen_without_a_quote_is_found():
    text = README.read_text(encoding="utf-8")
    (n, _), *_ = quotes(text)
    lines = text.splitlines()
    moved = "\n".join(["", *[""] * FIRST_SCREEN, *lines])  # the same text, pushed below the first screen
    assert quotes(moved)[0][0] == n + FIRST_SCREEN + 1
    assert any("no quote of the demo's answer" in p for p in problems(moved))


def test_a_closing_block_asking_another_question_is_found():
    question = demo_question()
    text = edited(f"\n{question}\n", f"\n{question.replace('across seeds', 'at one seed')}\n")
    assert any("not the demo's output" in p for p in problems(text))

"""What a page says more than twice: its text cut into clauses, the ones of four words or more
counted (issue 44: "run-to-run variation not included" said 19 times on one page).

A clause ends at a sentence's or a clause's punctuation followed by a space (. ; : , ! ?), at a
bracket opened or closed, at a table cell's or a line's end. Only clauses of at least MIN_WORDS
words count, a word being two letters or more: a number, a CI or a bare status ("finished",
"drift +14.0% > MIX_FORGET_LIMIT 10.0%") may recur where each run has one; a caveat or a caption
may not.
"""
from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser

MIN_WORDS = 4
MOST = 2  # a clause may be said twice (say the lead and the table that details it), never more
_ENDS = re.compile(r"[.;:,!?](?:\s+|$)|\s*[()\[\]]\s*|[\n\t]+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'_-]+")


def clauses(text: str) -> list[str]:
    """The text's clauses of MIN_WORDS words or more, whitespace collapsed."""
    found = (" ".join(part.split()) for part in _ENDS.split(text))
    return [clause for clause in found if len(_WORD.findall(clause)) >= MIN_WORDS]


def repeated(text: str, most: int = MOST) -> dict[str, int]:
    """Each clause said more than `most` times, with how often."""
    return {clause: n for clause, n in Counter(clauses(text)).items() if n > most}


class _Text(HTMLParser):
    """A page's text as a reader gets it: folded parts (<details>) included, a line per block, a tab
    per cell; scripts, styles and the model's own outputs (class "generated": quoted, not the page's
    words) left out."""

    SKIP = ("script", "style", "title")
    BREAKS = ("p", "li", "tr", "h1", "h2", "h3", "figcaption", "summary", "pre", "div", "ul", "table", "br")

    def __init__(self):
        super().__init__()
        self.parts: list[str] = []
        self._skipping: list[str] = []  # the tags opened inside a skipped element, innermost last

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if self._skipping or tag in self.SKIP or "generated" in classes:
            if tag not in VOID:
                self._skipping.append(tag)
            return
        if tag in ("td", "th"):
            self.parts.append("\t")

    def handle_endtag(self, tag):
        if self._skipping:
            if self._skipping[-1] == tag:
                self._skipping.pop()
            return
        if tag in self.BREAKS:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self._skipping:
            self.parts.append(data)


VOID = ("img", "br", "meta", "link", "input", "hr")


def page_text(page_html: str) -> str:
    parser = _Text()
    parser.feed(page_html)
    return "".join(parser.parts)

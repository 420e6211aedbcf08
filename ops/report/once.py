"""Say a thing once for all the runs it holds for: the report of a configuration's seeds would
otherwise say the same criteria, caveat or trainable line once per seed (issue 44)."""
from __future__ import annotations

import os
from pathlib import Path

EVERY_RUN = "every run"


def said_once(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(who, text) for each distinct text of (run name, text) pairs, in first-seen order: who is
    EVERY_RUN when the text holds for all of two runs or more, else the runs' names, comma-separated."""
    names: dict[str, list[str]] = {}
    for name, text in pairs:
        names.setdefault(text, []).append(name)
    every = len(pairs) > 1 and len(names) == 1
    return [(EVERY_RUN if every else ", ".join(who), text) for text, who in names.items()]


def opening(who: str) -> str:
    """`who` at the start of a line ("Every run", a run's name as it is)."""
    return who[:1].upper() + who[1:] if who == EVERY_RUN else who


def common_dir(paths: list[Path]) -> Path:
    """The deepest directory that holds every path (each one's parent for a single path)."""
    absolute = [str(Path(p).absolute()) for p in paths]
    return Path(os.path.commonpath([os.path.dirname(p) for p in absolute]))


def under(path: Path, base: Path) -> str:
    """path written from base (the directory said once above a list of paths)."""
    return os.path.relpath(Path(path).absolute(), base)

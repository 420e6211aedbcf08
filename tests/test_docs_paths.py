"""Every source path the README and docs/ name exists: a moved or renamed module (a prefix folded
into a package, a test moved into its folder) leaves no reader at a file that is not there."""
import re
from pathlib import Path

import pytest

from package_map import TOP_LEVEL

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a path with at least one folder, ending in .py: `daemon/seed_terms/anchor.py`, `../bench/eval.py`
PATH = re.compile(r"(?<![\w./-])(?:\.\./)?([A-Za-z_][\w-]*(?:/[\w.-]+)+\.py)\b")
# where a doc may name a path from: the repository, or inside one of its packages (architecture.md's
# "daemon/: ... run/state.py"), or the test and bench folders
BASES = [ROOT, *(ROOT / p for p in (*TOP_LEVEL.values(), "tests", "bench"))]


def named_paths(doc: Path) -> list[tuple[int, str]]:
    return [(n, m.group(1)) for n, line in enumerate(doc.read_text().splitlines(), 1) for m in PATH.finditer(line)]


def test_the_pattern_finds_what_docs_write():
    line = "see [anchor.py](../daemon/seed_terms/anchor.py) and `tests/daemon/test_ddp.py`, not foo.py or a.b.py"
    assert [m.group(1) for m in PATH.finditer(line)] == ["daemon/seed_terms/anchor.py", "tests/daemon/test_ddp.py"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_named_source_path_exists(doc):
    missing = [f"{doc.name}:{n}: {path}" for n, path in named_paths(doc) if not any((b / path).is_file() for b in BASES)]
    assert not missing, "\n".join(missing)

"""Every source path the README, docs/, and the tests' and benchmarks' own text name exists: a moved or renamed module (a prefix folded
into a package, a test moved into its folder) leaves no reader at a file that is not there."""
import importlib.util
import re
from pathlib import Path

import pytest

from package_map import TOP_LEVEL

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# the tests' and benchmarks' docstrings and comments name source files too (what they test, measure, mirror)
SOURCES = sorted(p for folder in ("tests", "bench") for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)
# a path with at least one folder, ending in .py: `daemon/retention/anchor.py`, `../bench/eval.py`
PATH = re.compile(r"(?<![\w./-])(?:\.\./)?([A-Za-z_][\w-]*(?:/[\w.-]+)+\.py)\b")
# where a doc may name a path from: the repository, or inside one of its packages (architecture.md's
# "daemon/: ... run/state.py"), or the test and bench folders
BASES = [ROOT, *(ROOT / p for p in (*TOP_LEVEL.values(), "tests", "bench"))]
# a benchmark that mirrors torch names torch's own files (`torch/optim/adam.py`): where torch is installed
_TORCH = importlib.util.find_spec("torch")
INSTALLED = [Path(_TORCH.origin).parents[1]] if _TORCH and _TORCH.origin else []


def named_paths(doc: Path) -> list[tuple[int, str]]:
    return [(n, m.group(1)) for n, line in enumerate(doc.read_text().splitlines(), 1) for m in PATH.finditer(line)]


def test_the_pattern_finds_what_docs_write():
    line = "see [anchor.py](../daemon/retention/anchor.py) and `tests/daemon/test_ddp.py`, not foo.py or a.b.py"
    assert [m.group(1) for m in PATH.finditer(line)] == ["daemon/retention/anchor.py", "tests/daemon/test_ddp.py"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_named_source_path_exists(doc):
    missing = [f"{doc.name}:{n}: {path}" for n, path in named_paths(doc) if not any((b / path).is_file() for b in BASES)]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_source_path_a_test_or_benchmark_names_exists(source):
    here = [source.parent]  # a test may name a file beside it (`tiny_world.py` is the conftest's neighbour)
    missing = [f"{source.relative_to(ROOT)}:{n}: {path}" for n, path in named_paths(source)
               if not any((b / path).is_file() for b in [*BASES, *INSTALLED, *here])]
    assert not missing, "\n".join(missing)

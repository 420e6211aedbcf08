"""The dependency rule, checked on the source itself (ast, no imports run).

Every `import` counts, at module level and inside functions alike: a lazy import that only
breaks a cycle is still a cycle. The layers (docs/architecture.md, "Dependencies"):
sweep -> daemon, evals (and model, data, tatu core), never ops; ops -> sweep, daemon; nothing
imports daemon except sweep and ops; model/ and evals/ never import torch.distributed, systemd
or socket code. Inside sweep/, its four packages point one way too: plan <- judge <- report, and
run uses plan and judge (only its command line presents a report); the coordinator asks the judge,
never a report module."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from package_map import ROOT, TOP_LEVEL

# package -> folder: pyproject's package-dir, tatu and its top-level packages (the layers)
PACKAGES = TOP_LEVEL


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if package == "tatu" and parts and f"tatu.{parts[0]}" in PACKAGES:
                continue
            found[name] = path
    return found


def imported_names(path: Path, name: str) -> set[str]:
    """Every module name `path` imports anywhere in its body (absolute, relative resolved)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module
            out.add(stem)
            out.update(f"{stem}.{alias.name}" for alias in node.names)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges = {}
    for name, path in mods.items():
        targets = set()
        for imported in imported_names(path, name):
            # `from tatu.model import gpt` names the module tatu.model.gpt; `from tatu.x import f`
            # names the module tatu.x
            while imported and imported not in mods:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not (name.startswith(imported + ".") and mods[imported].name == "__init__.py"):
                targets.add(imported)
        edges[name] = targets
    return edges


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and f"tatu.{parts[1]}" in PACKAGES else "core"


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    colour, stack = {}, []

    def visit(node):
        colour[node] = "grey"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if colour.get(nxt) == "grey":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in colour and (found := visit(nxt)):
                return found
        stack.pop()
        colour[node] = "black"
        return None

    for node in sorted(edges):
        if node not in colour and (found := visit(node)):
            return found
    return None


# which layers each layer may import (besides itself)
ALLOWED = {
    "core": set(),
    "model": {"core"},
    "data": {"core", "model"},
    "evals": {"core", "model", "data"},
    "daemon": {"core", "model", "data", "evals"},
    "sweep": {"core", "model", "data", "evals", "daemon"},
    "ops": {"core", "model", "data", "evals", "daemon", "sweep", "units"},  # `tatu units install` copies the unit files
    "units": set(),  # package data (unit files, env files): it imports nothing
}
# what model/ and evals/ never import, so they stay usable from a notebook
FORBIDDEN_IN_LIBRARIES = ("torch.distributed", "sdnotify", "socket", "systemd", "selectors")


def test_no_import_cycle_counting_imports_inside_functions():
    assert find_cycle(graph()) is None, f"import cycle: {' -> '.join(find_cycle(graph()))}"


def test_cycle_finder_finds_a_lazy_cycle(tmp_path):
    """The checker itself: a cycle through an import inside a function is found."""
    (tmp_path / "a.py").write_text("import tatu.b\n")
    (tmp_path / "b.py").write_text("def f():\n    from tatu import a\n")
    edges = {n: {m for m in imported_names(tmp_path / f"{n[-1]}.py", n) if m in ("tatu.a", "tatu.b") and m != n}
             for n in ("tatu.a", "tatu.b")}
    assert find_cycle(edges) == ["tatu.a", "tatu.b", "tatu.a"]


def test_layers_point_one_way():
    bad = [f"{src} imports {dst}" for src, dsts in graph().items() for dst in sorted(dsts)
           if layer(dst) != layer(src) and layer(dst) not in ALLOWED[layer(src)]]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", ["tatu.model", "tatu.evals"])
def test_libraries_import_no_process_or_service_code(package):
    bad = [f"{name} imports {imported}" for name, path in modules().items() if name.startswith(package)
           for imported in sorted(imported_names(path, name))
           if any(imported == f or imported.startswith(f + ".") for f in FORBIDDEN_IN_LIBRARIES)]
    assert not bad, "\n".join(bad)


# tatu.sweep's four packages (docs/architecture.md, "sweep/"): what each may import besides itself
# (and SWEEP_SHARED, the layer's own error and its package). `tatu sweep report` is a command of
# the command line, so run.cli alone may import report; everything the coordinator imports may not.
SWEEP_ALLOWED = {"plan": set(), "judge": {"plan"}, "report": {"plan", "judge"}, "run": {"plan", "judge"}}
SWEEP_SHARED = ("tatu.sweep", "tatu.sweep.errors")
SWEEP_EXCEPTIONS = {"tatu.sweep.run.cli": {"report"}}


def sweep_package(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["tatu", "sweep"] and parts[2] in SWEEP_ALLOWED else None


def sweep_violations(edges: dict[str, set[str]]) -> list[str]:
    """Each import between two of sweep's packages that SWEEP_ALLOWED does not allow."""
    bad = []
    for src, dsts in sorted(edges.items()):
        here = sweep_package(src)
        for dst in sorted(dsts):
            there = sweep_package(dst)
            if here and there and there != here and there not in SWEEP_ALLOWED[here] | SWEEP_EXCEPTIONS.get(src, set()):
                bad.append(f"{src} imports {dst}")
    return bad


def test_sweep_packages_point_one_way():
    bad = sweep_violations(graph())
    assert not bad, "\n".join(bad)


def test_the_sweep_rule_finds_a_judge_importing_a_report():
    """The checker itself: a judging module reaching for a presenting one is caught, a report reading
    the judge is not, and the command line's exception is its own."""
    edges = {"tatu.sweep.judge.verdict": {"tatu.sweep.report.tables", "tatu.sweep.plan.rule"},
             "tatu.sweep.report.tables": {"tatu.sweep.judge.records"},
             "tatu.sweep.run.coordinator": {"tatu.sweep.report.status"},
             "tatu.sweep.run.cli": {"tatu.sweep.report.write"}}
    assert sweep_violations(edges) == ["tatu.sweep.judge.verdict imports tatu.sweep.report.tables",
                                       "tatu.sweep.run.coordinator imports tatu.sweep.report.status"]


def test_every_sweep_module_lies_in_one_of_its_packages():
    packages = {f"tatu.sweep.{p}" for p in SWEEP_ALLOWED}
    loose = [name for name in modules() if name.startswith("tatu.sweep.") and name not in SWEEP_SHARED
             and name not in packages and sweep_package(name) is None]
    assert not loose, f"outside plan/ run/ judge/ report/: {loose}"


def test_the_coordinator_never_reaches_a_report_module():
    """Everything the coordinator imports, however indirectly, is plan, judge or run: it asks the judge."""
    edges, seen, todo = graph(), set(), ["tatu.sweep.run.coordinator"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += sorted(edges.get(module, ()))
    assert not [m for m in seen if sweep_package(m) == "report"], sorted(m for m in seen if sweep_package(m) == "report")


def test_every_layer_has_its_rule():
    """A package pyproject gains is a layer: it needs its row in ALLOWED before anything imports it."""
    assert {layer(name) for name in PACKAGES} == set(ALLOWED)


# What reads run dirs without training: the sweep's coordinator (a service of its own that only
# starts members and reads their files) and the common step's reader never load torch, so a
# sweep command is not seconds of torch start-up per call (they once did, for a path helper).
TORCH_FREE = ("tatu.sweep.judge.common_step", "tatu.sweep.run.coordinator", "tatu.daemon.run.paths")


@pytest.mark.parametrize("module", TORCH_FREE)
def test_run_dir_readers_load_no_torch(module):
    probe = (f"import sys, {module}; "
             "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", f"{module} loads {proc.stdout.strip()}"


def test_only_the_command_line_raises_tatu_exit():
    """tatu/exitcodes.py: TatuExit is ops/'s; a library layer raises its own error (with its code
    where it has several: tatu.sweep.errors.SweepError, tatu.envfile.EnvFileError)."""
    bad = [name for name, path in modules().items()
           if layer(name) != "ops" and name != "tatu.exitcodes" and "tatu.exitcodes.TatuExit" in imported_names(path, name)]
    assert not bad, f"import TatuExit outside ops/: {bad}"

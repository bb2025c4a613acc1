"""The package's shape (docs/architecture.md): notebooks -> gpt_lesson -> torch, tools apart.

* no import cycle between the package's modules (imports inside functions count too);
* the package never imports the repository's tools (``tools/``, ``benchmarks/``, ``tests/``);
* no attribute of a package hides a submodule of the same name;
"""
from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import gpt_lesson

PACKAGE = Path(gpt_lesson.__file__).parent

def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str) -> set[str]:
    """The gpt_lesson modules that ``module`` imports, anywhere in its code."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            # ``from pkg import sub`` imports the submodule; ``from pkg import name`` needs pkg's __init__.
            target = _resolve(module, path.name == "__init__.py", node)
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]
        else:
            continue
        for name in names:
            # the longest prefix that is a module of the package
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def _graph() -> dict[str, set[str]]:
    return {m: imports_of(m) for m in MODULES}


def test_no_import_cycles():
    cycle = find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_package_never_imports_repository_tools():
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                assert name.split(".")[0] not in {"tools", "benchmarks", "tests", "conftest"}, \
                    f"{module} imports {name}: the package must not depend on repository tools"
        text = path.read_text(encoding="utf-8")
        assert "sys.path.insert" not in text and "sys.path.append" not in text, f"{module} edits sys.path"


def test_no_attribute_hides_a_submodule():
    for info in pkgutil.walk_packages(gpt_lesson.__path__, "gpt_lesson."):
        module = importlib.import_module(info.name)
        parent_name, _, child = info.name.rpartition(".")
        parent = importlib.import_module(parent_name)
        value = getattr(parent, child, None)
        assert value is None or value is module, (
            f"{parent_name}.{child} is {value!r}, not the submodule {info.name}: "
            "an attribute of the same name hides the module")


def test_check_labels_are_imported_by_name_not_injected():
    """checks/__init__ names every label it re-exports (grep finds them); no globals() injection."""
    from gpt_lesson import checks

    path = PACKAGE / "checks" / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for a in node.names}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "globals"]
    assert calls == []
    assert set(checks.LABELS) <= imported, sorted(set(checks.LABELS) - imported)
    assert all(getattr(checks, name) == value for name, value in checks.LABELS.items())

"""The layers import downward only, and no module imports itself back through others."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"mbctl": "mbctl", "dynamics": "mbctl.dynamics", "ctrl": "mbctl.ctrl", "hardware": "mbctl.hardware", "identification": "mbctl.identification"}
# ground floor 0 -> dynamics 1 -> ctrl 2 -> hardware 3 -> identification 4 -> studies 5 -> pictures 6
# -> command line 7
# (mbctl/__main__.py, `python -m mbctl`, is the command line)
RANKS = (("mbctl.cli", 7), ("mbctl.__main__", 7), ("mbctl.viz", 6), ("mbctl.study", 5), ("mbctl.identification", 4), ("mbctl.hardware", 3), ("mbctl.ctrl", 2), ("mbctl.dynamics", 1), ("mbctl", 0))
FACADE = "mbctl"  # mbctl/__init__.py re-exports entry points of every layer, lazily


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if folder == "mbctl" and parts and parts[0] in FOLDERS:
                continue
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _rank(module: str) -> int:
    return next(rank for prefix, rank in RANKS if module == prefix or module.startswith(prefix + "."))


def _imports(module: str, path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return {n for n in names if n in MODULES}


def test_every_layer_folder_is_found():
    """The walk sees modules of every layer (a renamed folder would silently empty the test)."""
    assert {_rank(m) for m in MODULES} == {0, 1, 2, 3, 4, 5, 6, 7}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != FACADE))
def test_imports_point_down(module):
    """No module imports one of a higher layer (function-level imports included)."""
    upward = sorted(n for n in _imports(module, MODULES[module], False) if _rank(n) > _rank(module))
    assert not upward, f"{module} (layer {_rank(module)}) imports {upward}"


def test_no_import_cycles():
    """Module-level imports form no cycle."""
    graph = {m: _imports(m, p, True) - {m} for m, p in MODULES.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)

"""The package's structure: no import circle between pigeon's modules, counting every
import the code holds (type-only ones under TYPE_CHECKING and function-level ones too,
which hide a circle from Python but not from the next reader), and a design document
that names every package and every store protocol there is.

The layers themselves are import-linter's contract in pyproject.toml (``make lint``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pigeon

SOURCE = Path(pigeon.__file__).parent
DESIGN = SOURCE.parent.parent / "docs" / "design.md"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The pigeon modules ``path`` imports: ``from a.b import c`` is a.b.c when that is a
    module, else a.b; relative imports resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in SOURCE.rglob("*.py")}
    modules = set(paths)
    return {name: _imports(path, modules) for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_scan_sees_the_imports() -> None:
    graph = import_graph()
    assert "pigeon.core.operation" in graph["pigeon.edge.queue"]
    assert "pigeon.server.intake" in graph["pigeon.server.app"]
    assert len(graph) > 150


def test_the_circle_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    assert circles(import_graph()) == []


def test_the_design_names_every_package_and_store_protocol() -> None:
    design = DESIGN.read_text()
    packages = sorted(
        _module_name(p.parent) for p in SOURCE.rglob("__init__.py") if p.parent != SOURCE
    )
    missing = [p for p in packages if f"`{p}`" not in design and f"`{p}/`" not in design]
    assert missing == [], "docs/design.md does not name these packages"
    protocols = sorted(
        node.name
        for path in SOURCE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(b).split("[")[0] == "Protocol" for b in node.bases)
    )
    absent = [name for name in protocols if f"`{name}`" not in design]
    assert absent == [], "docs/design.md does not name these protocols"

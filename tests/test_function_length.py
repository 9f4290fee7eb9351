"""Shorter paths: no function in pigeon is longer than 60 lines (``end_lineno - lineno``,
its signature and docstring included), so each reads on one screen; a longer one is split
into named parts. What remains over is listed below with its reason, a list that may only
shrink: a function that got shorter must leave it (`test_the_allow_list_is_current`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pigeon

SOURCE = Path(pigeon.__file__).parent
LIMIT = 60

# "module path::qualified name": why it is still over.
TOO_LONG: dict[str, str] = {
    "cli/worker_cmd.py::worker": "a typer command: half of it is its option declarations",
    "cli/plan_cmd.py::plan": "a typer command (owned by the backlog branch)",
    "cli/jobs_cmd.py::stats_cmd": "a typer command: options, then one table per section",
    "ops/web.py::page_routes": "the ops pages' routes as closures over one session",
    "demo/conflicts.py::_scenario": "the conflicts demo's script, one step after another",
    "demo/run.py::run_demo": "the sync demo's script: server, proxy, device, reconciliation",
    "sync/executor.py::Executor._settle": "the sync's settle step (owned by the sync branch)",
    "sync/classify.py::classify": "one table of replies to outcomes (owned by the sync branch)",
    "jobs/worker.py::Worker.__init__": "deprecated keyword arguments kept one release",
}


def _over(tree: ast.AST, rel: str) -> dict[str, int]:
    """The functions of ``tree`` (methods and nested ones too) over `LIMIT` lines."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                assert child.end_lineno is not None
                if child.end_lineno - child.lineno > LIMIT:
                    found[f"{rel}::{name}"] = child.end_lineno - child.lineno
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def long_functions() -> dict[str, int]:
    """Every function of pigeon over `LIMIT` lines, with its length."""
    found: dict[str, int] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        rel = path.relative_to(SOURCE).as_posix()
        found.update(_over(ast.parse(path.read_text(), str(path)), rel))
    return found


def test_no_function_is_longer_than_the_limit() -> None:
    over = {name: n for name, n in long_functions().items() if name not in TOO_LONG}
    assert not over, f"split into named parts (at most {LIMIT} lines each): {over}"


def test_the_allow_list_is_current() -> None:
    stale = sorted(set(TOO_LONG) - set(long_functions()))
    assert not stale, f"no longer over {LIMIT} lines: take {stale} off TOO_LONG"


def test_the_scan_measures_methods_and_nested_functions() -> None:
    body = "\n".join(["        x = 1"] * (LIMIT + 1))
    source = (
        f"class A:\n    def long(self):\n{body}\n"
        f"    def short(self):\n        pass\n"
        f"def outer():\n    def inner():\n{body}\n"
    )
    found = _over(ast.parse(source), "m.py")
    assert found == {"m.py::A.long": 61, "m.py::outer": 62, "m.py::outer.inner": 61}

"""The jobs component's seam to the database: only the store implementations
(``pigeon/jobs/stores/``) know which backend they run on."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pigeon.jobs

JOBS = Path(pigeon.jobs.__file__).parent
STORES = JOBS / "stores"
DRIVERS = {"sqlite3", "psycopg", "psycopg_pool"}


def _policy_modules() -> list[Path]:
    return sorted(p for p in JOBS.rglob("*.py") if STORES not in p.parents)


def _imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _backend_comparisons(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "backend" for s in sides):
                lines.append(node.lineno)
    return lines


def test_the_scan_sees_the_policy_modules_and_not_the_stores() -> None:
    names = {p.name for p in _policy_modules()}
    assert {"manager.py", "worker.py", "failed.py", "retention.py", "wakeup.py"} <= names
    assert not any(STORES in p.parents for p in _policy_modules())


def test_no_driver_import_outside_the_store_implementations() -> None:
    found = {
        str(p.relative_to(JOBS)): sorted(_imports(ast.parse(p.read_text())) & DRIVERS)
        for p in _policy_modules()
    }
    assert {name: drivers for name, drivers in found.items() if drivers} == {}


def test_no_backend_comparison_outside_the_store_implementations() -> None:
    found = {
        str(p.relative_to(JOBS)): _backend_comparisons(ast.parse(p.read_text()))
        for p in _policy_modules()
    }
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_the_scan_finds_what_it_forbids() -> None:
    tree = ast.parse("import psycopg\nfrom sqlite3 import connect\nif tx.backend == 'x': pass\n")
    assert _imports(tree) == {"psycopg", "sqlite3"}
    assert _backend_comparisons(tree) == [3]


def test_importing_the_jobs_component_does_not_load_psycopg() -> None:
    """The PostgreSQL store, and the driver with it, load only for a PostgreSQL database."""
    code = "import sys, pigeon.jobs, pigeon.jobs.worker; print('psycopg' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

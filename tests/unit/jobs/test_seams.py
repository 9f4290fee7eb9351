"""The jobs component's seam to the database: only the store implementations
(``pigeon/jobs/stores/``) know which backend they run on, and only they run statements on
a storage transaction; everything else in ``pigeon.jobs`` goes through a session, by the
role it uses (``pigeon.jobs.store``)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pigeon.jobs
from tests import processes

JOBS = Path(pigeon.jobs.__file__).parent
STORES = JOBS / "stores"
DRIVERS = {"sqlite3", "psycopg", "psycopg_pool"}
# What a storage ``Tx`` offers a caller that bypasses the store: its statements, raw SQL,
# and the cipher that seals and opens what it writes and reads.
STATEMENTS = {"execute", "executemany", "fetchone", "fetchall", "sql", "cipher"}
# Modules of pigeon.jobs (outside the stores) allowed to reach the storage transaction
# directly, with why. It may only shrink: an entry no longer needed fails the test too.
# (Empty: the application-facing helpers that run in the caller's transaction, such as
# records.accept, outbox.add, ledger.*, access.* and effects, write through
# ``session_for(tx)``, the jobs store's session on that transaction.)
ALLOWED_STATEMENTS: dict[str, list[str]] = {}


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


def _storage_reach(tree: ast.AST) -> list[str]:
    """``line:what`` of each statement run on, or cipher taken from, a transaction, and
    each use of ``pigeon.jobs._db.reading`` (a raw read transaction)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in STATEMENTS:
            found.append(f"{node.lineno}:{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "pigeon.jobs._db":
            if any(alias.name == "reading" for alias in node.names):
                found.append(f"{node.lineno}:reading")
        elif (  # ``_db.reading(db)``; a store's own ``store.reading()`` is the way in
            isinstance(node, ast.Attribute)
            and node.attr == "reading"
            and isinstance(node.value, ast.Name)
            and node.value.id == "_db"
        ):
            found.append(f"{node.lineno}:reading")
    return sorted(found, key=lambda item: (int(item.split(":")[0]), item))


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


def test_no_statement_on_a_storage_transaction_outside_the_stores() -> None:
    found = {
        str(p.relative_to(JOBS)): _storage_reach(ast.parse(p.read_text()))
        for p in _policy_modules()
    }
    assert {name: lines for name, lines in found.items() if lines} == ALLOWED_STATEMENTS


def test_the_scan_finds_what_it_forbids() -> None:
    tree = ast.parse("import psycopg\nfrom sqlite3 import connect\nif tx.backend == 'x': pass\n")
    assert _imports(tree) == {"psycopg", "sqlite3"}
    assert _backend_comparisons(tree) == [3]
    reach = ast.parse(
        "from pigeon.jobs._db import loads, reading\n"
        "with reading(db) as tx:\n"
        "    tx.fetchall('job_list', {})\n"
        "    tx.execute('x', {}); tx.executemany('x', []); tx.fetchone('x', {})\n"
        "tx.sql('SELECT 1', {}).fetchone()\n"
        "sealed = tx.cipher.seal(v)\n"
        "_db.reading(db)\n"
        "with store.reading() as session: session.get_job(1)\n"
    )
    assert _storage_reach(reach) == [
        "1:reading", "3:fetchall", "4:execute", "4:executemany", "4:fetchone", "5:fetchone",
        "5:sql", "6:cipher", "7:reading",
    ]  # fmt: skip


def test_importing_the_jobs_component_does_not_load_psycopg() -> None:
    """The PostgreSQL store, and the driver with it, load only for a PostgreSQL database."""
    code = "import sys, pigeon.jobs, pigeon.jobs.worker; print('psycopg' in sys.modules)"
    out = processes.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

"""The seam to the database, package-wide: only the storage layer and the stores know the
drivers and the backend, and the library's core loads neither the reference app nor a
driver it does not use.

The per-component scans (tests/edge/test_seams.py, tests/unit/jobs/test_seams.py) say
more about their components; this one covers every module of pigeon, so a new module
(the CLI, the logs, ops) cannot reach past the seam unnoticed.

What the scan forbids outside the seam (`in_seam`):
- importing ``sqlite3``, ``psycopg`` or ``psycopg_pool`` (at the top or inside a
  function), or reaching one by name (``importlib.import_module("psycopg")``,
  ``sys.modules.get("psycopg")``): the CLI and the logs ask ``pigeon.storage.errors``;
- reading a database's or transaction's ``.backend`` (``tx.backend``, ``getattr(db,
  "backend")``), let alone comparing it: a component's named SQL is chosen by
  ``pigeon.storage.queries.QuerySet``, a backend's behaviour lives in its store.
"""

from __future__ import annotations

import ast
import json
import sys
import textwrap
from pathlib import Path

import pytest

import pigeon
from tests import processes

SOURCE = Path(pigeon.__file__).parent
DRIVERS = frozenset({"sqlite3", "psycopg", "psycopg_pool"})

# The seam: the drivers, connections, migrations and driver-error mapping (storage/), and
# each component's store implementations, which are written for one backend each.
SEAM_PACKAGES = ("storage", "jobs/stores", "edge/sqlite")
SEAM_MODULES = frozenset({"server/idempotency_stores.py"})
# Store modules still outside their component's store package: each entry goes when its
# module has moved, and an entry whose module is gone or no longer reaches past the seam
# fails the test below, so the list only shrinks. (Empty: the edge's moved to edge/sqlite/.)
IN_TRANSIT: dict[str, str] = {}


def in_seam(relative: str) -> bool:
    """Is the module at ``relative`` (to the pigeon package, with ``/``) part of the seam?"""
    return relative in SEAM_MODULES or relative.startswith(tuple(p + "/" for p in SEAM_PACKAGES))


def _driver_named(node: ast.AST) -> bool:
    """A string constant naming a driver, as an argument or a subscript (``import_module``,
    ``sys.modules.get``, ``sys.modules[...]``)."""
    args: list[ast.AST] = []
    if isinstance(node, ast.Call):
        args = [*node.args, *(k.value for k in node.keywords)]
    elif isinstance(node, ast.Subscript):
        args = [node.slice]
    return any(isinstance(a, ast.Constant) and a.value in DRIVERS for a in args)


def driver_uses(tree: ast.AST) -> list[int]:
    """The lines that import a driver or reach one by name."""
    lines = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        if any(n.split(".")[0] in DRIVERS for n in names) or _driver_named(node):
            lines.append(node.lineno)
    return sorted(lines)


def _is_backend(node: ast.AST) -> bool:
    """``x.backend`` read, ``getattr(x, "backend"...)``, or a local named ``backend``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "backend" and isinstance(node.ctx, ast.Load)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return (
            node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == "backend"
        )
    return False


def backend_reads(tree: ast.AST) -> list[int]:
    """The lines that read a database's or transaction's backend."""
    return sorted({node.lineno for node in ast.walk(tree) if _is_backend(node)})


def backend_comparisons(tree: ast.AST) -> list[int]:
    """The lines that compare a backend (``tx.backend == "sqlite"``, ``backend != ...``)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = any(isinstance(s, ast.Name) and s.id == "backend" for s in sides)
            if named or any(_is_backend(s) for s in sides):
                lines.add(node.lineno)
    return sorted(lines)


def modules() -> dict[str, ast.AST]:
    """Every module of pigeon, by its path relative to the package."""
    return {
        path.relative_to(SOURCE).as_posix(): ast.parse(path.read_text(), str(path))
        for path in sorted(SOURCE.rglob("*.py"))
    }


def violations() -> dict[str, dict[str, list[int]]]:
    """Each module outside the seam that reaches past it: what it does, on which lines."""
    found: dict[str, dict[str, list[int]]] = {}
    for name, tree in modules().items():
        if in_seam(name):
            continue
        kinds = {
            "driver": driver_uses(tree),
            "backend read": backend_reads(tree),
            "backend comparison": backend_comparisons(tree),
        }
        kinds = {kind: lines for kind, lines in kinds.items() if lines}
        if kinds:
            found[name] = kinds
    return found


def test_nothing_outside_the_seam_names_a_driver_or_a_backend() -> None:
    found = {name: kinds for name, kinds in violations().items() if name not in IN_TRANSIT}
    assert found == {}, (
        "a driver or a backend outside pigeon.storage and the stores: ask "
        "pigeon.storage.errors / pigeon.storage.queries.QuerySet, or move the code into "
        f"the component's store: {found}"
    )


def test_the_modules_in_transit_still_need_their_allowance() -> None:
    found = violations()
    stale = sorted(name for name in IN_TRANSIT if name not in found)
    assert not stale, f"moved or clean now: take {stale} off IN_TRANSIT"


def test_the_scan_sees_the_package_and_the_seam() -> None:
    names = set(modules())
    assert {"cli/__init__.py", "logs.py", "ops/actions.py", "server/intake.py"} <= names
    assert len(names) > 150
    seam = {name for name in names if in_seam(name)}
    assert {"storage/sqlite.py", "storage/errors.py", "jobs/stores/postgres.py"} <= seam
    assert "server/idempotency_stores.py" in seam
    assert not seam & {"server/intake.py", "jobs/manager.py", "cli/_db.py", "storagex.py"}
    assert not in_seam("storage.py") and not in_seam("jobs/stores.py")
    # The seam itself does what is forbidden elsewhere: the scan is looking at the right thing.
    tree = modules()
    assert driver_uses(tree["storage/errors.py"]) and driver_uses(tree["storage/sqlite.py"])
    assert backend_comparisons(tree["server/idempotency_stores.py"])


def test_the_scan_finds_what_it_forbids() -> None:
    code = textwrap.dedent(
        """
        import psycopg.rows
        from sqlite3 import connect
        def lazily():
            import psycopg_pool
        importlib.import_module("psycopg")
        sys.modules.get("psycopg")
        sys.modules["sqlite3"]
        if tx.backend == "sqlite": pass
        if backend != "postgres": pass
        kind = getattr(db, "backend", None)
        queries[tx.backend]
        tx.backend = "memory"
        from .sqlite3 import x
        import sqlite3x
        """
    )
    tree = ast.parse(code)
    assert driver_uses(tree) == [2, 3, 5, 6, 7, 8]
    assert backend_reads(tree) == [9, 11, 12]  # an assignment is not a read
    assert backend_comparisons(tree) == [9, 10]


# -- what importing the library loads --------------------------------------------------

# Never loaded by the library's core: the reference application, its CRDT library, the demo.
NOT_CORE = ("pycrdt", "pigeon.reference", "pigeon.demo")
# Loaded only once a PostgreSQL database is opened.
POSTGRES_ONLY = ("psycopg", "psycopg_pool")


def loaded_after(code: str) -> list[str]:
    """The modules of NOT_CORE and POSTGRES_ONLY loaded after running ``code`` in a new
    interpreter (this one has loaded everything the tests use)."""
    watched = NOT_CORE + POSTGRES_ONLY
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted(m for m in sys.modules if any(m == w or m.startswith(w + '.') "
        f"for w in {watched!r}))))"
    )
    run = processes.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    found: list[str] = json.loads(run.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize(
    "module", ["pigeon", "pigeon.server", "pigeon.jobs", "pigeon.jobs.worker", "pigeon.ops"]
)
def test_importing_the_core_loads_neither_the_reference_app_nor_a_driver(module: str) -> None:
    assert loaded_after(f"import {module}") == []


def test_a_sqlite_server_answers_without_loading_psycopg(tmp_path: Path) -> None:
    """A whole SQLite server (database, intake, app, one write and its replay, the store
    errors asked for on every request) never loads the PostgreSQL driver."""
    code = textwrap.dedent(
        f"""
        from starlette.testclient import TestClient
        from pigeon.server import Intake, create_app
        from pigeon.storage.server import open_server_db

        db = open_server_db({str(tmp_path / "server.db")!r})
        intake = Intake(db)
        intake.add_operation("POST", "/things", lambda ctx: (201, {{"ok": True}}))
        with TestClient(create_app(intake, purge_interval=None)) as client:
            for _ in range(2):
                sent = client.post(
                    "/things", json={{}}, headers={{"Idempotency-Key": "k1",
                    "Authorization": "Bearer alice.t"}}
                )
                assert sent.status_code == 201, sent.text
        db.close()
        """
    )
    assert loaded_after(code) == []


def test_opening_a_postgres_database_is_what_loads_psycopg(pg_url: str) -> None:
    """The other side of the check above: the watch sees the driver when it is used."""
    code = f"from pigeon.storage.server import open_server_db\nopen_server_db({pg_url!r}).close()"
    assert set(loaded_after(code)) >= {"psycopg", "psycopg_pool"}

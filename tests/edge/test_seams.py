"""The edge and sync seams: the sync engine never touches SQLite, and the edge reaches its
file only through its store (`pigeon.edge.queue_store.QueueStore`, implemented by
`pigeon.edge.sqlite.EdgeStore`). A scan of the imports keeps it that way: only the
sub-package `pigeon/edge/sqlite/` imports anything of SQLite."""

from __future__ import annotations

import ast
from pathlib import Path

import pigeon.edge
import pigeon.sync
from pigeon import OfflineQueue
from pigeon.edge.conflicts import ConflictStore
from pigeon.edge.queue_store import QueueStore

SQLITE_MODULES = ("sqlite3", "pigeon.storage.sqlite", "pigeon.storage.queries")


def _sqlite_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found += [n for n in names if n.startswith(SQLITE_MODULES)]
    return found


def test_sync_imports_nothing_of_sqlite() -> None:
    sync = Path(pigeon.sync.__file__).parent
    assert {p.name: _sqlite_imports(p) for p in sync.rglob("*.py") if _sqlite_imports(p)} == {}


def test_edge_reaches_sqlite_only_in_its_sqlite_package() -> None:
    edge = Path(pigeon.edge.__file__).parent
    users = {
        str(p.relative_to(edge)): _sqlite_imports(p)
        for p in edge.rglob("*.py")
        if _sqlite_imports(p) and p.parent != edge / "sqlite"
    }
    assert users == {}
    # and the scan does see the imports where they are
    assert _sqlite_imports(edge / "sqlite" / "store.py")


def test_the_queue_moves_operations_only_through_its_store() -> None:
    """OfflineQueue keeps the policy: no transaction, no SQL, no row of its own."""
    source = Path(pigeon.edge.__file__).parent.joinpath("queue.py").read_text()
    for raw in ("tx.", ".execute(", ".fetchone(", ".fetchall(", ".read()", ".write()"):
        assert source.count(raw) == 0, raw


def test_queue_store_declares_what_the_queue_calls() -> None:
    """Every attribute OfflineQueue reads off its store is declared by QueueStore."""
    source = Path(pigeon.edge.__file__).parent.joinpath("queue.py").read_text()
    called = {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "_store"
    }
    declared = {name for name in dir(QueueStore) if not name.startswith("__")}
    assert called and called <= declared, called - declared


def test_conflict_records_go_through_the_store(tmp_path: Path) -> None:
    source = Path(pigeon.edge.__file__).parent.joinpath("conflicts.py").read_text()
    assert ".transaction()" not in source and "tx.conn" not in source
    with OfflineQueue(tmp_path / "q.db") as queue:
        assert isinstance(queue.conflicts, ConflictStore)
        queue.conflicts.remember("note:1", "v1", {"a": 1})
        assert queue.store.snapshot("note:1") is not None

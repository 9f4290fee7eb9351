"""The edge and sync seams: the sync engine never touches SQLite, and the edge reaches its
file only through its store (`pigeon.edge.queue_store.QueueStore`, implemented by
`pigeon.edge.store.EdgeStore`). A scan of the imports keeps it that way; the edge modules
still listed in STILL_ON_SQLITE are the store's, due to move into one sub-package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pigeon.edge
import pigeon.sync
from pigeon import OfflineQueue
from pigeon.edge.conflicts import ConflictStore

SQLITE_MODULES = ("sqlite3", "pigeon.storage.sqlite", "pigeon.storage.queries")
# The SQLite store and the helpers it runs inside its transactions. Shrinks, never grows.
STILL_ON_SQLITE = {
    "append.py",
    "owners.py",
    "queue.py",  # OfflineQueue.transaction(), deprecated; its transitions' transactions
    "rows.py",
    "stamps.py",
    "stats.py",
    "store.py",
}


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


def test_edge_reaches_sqlite_only_in_its_store() -> None:
    edge = Path(pigeon.edge.__file__).parent
    users = {p.name for p in edge.glob("*.py") if _sqlite_imports(p)}
    assert users <= STILL_ON_SQLITE, users - STILL_ON_SQLITE


def test_conflict_records_go_through_the_store(tmp_path: Path) -> None:
    source = Path(pigeon.edge.__file__).parent.joinpath("conflicts.py").read_text()
    assert ".transaction()" not in source and "tx.conn" not in source
    with OfflineQueue(tmp_path / "q.db") as queue:
        assert isinstance(queue.conflicts, ConflictStore)
        queue.conflicts.remember("note:1", "v1", {"a": 1})
        assert queue.store.snapshot("note:1") is not None


def test_transaction_is_deprecated(tmp_path: Path) -> None:
    with (
        OfflineQueue(tmp_path / "q.db") as queue,
        pytest.deprecated_call(match="transaction"),
        queue.transaction() as tx,
    ):
        assert tx.fetchone("get_state") is not None

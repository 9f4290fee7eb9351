"""The drivers' errors in pigeon's words (``pigeon.storage.errors``), and the seam: the
server's domain code asks storage, it never imports a driver."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import psycopg
import pytest

from pigeon.exceptions import Contention, LockTimeout, StorageFull, StoreUnavailable
from pigeon.storage.errors import from_postgres, is_full, lock_timed_out, store_down
from pigeon.storage.server import open_server_db

SRC = Path(__file__).resolve().parents[2] / "src" / "pigeon"


def test_postgres_errors_map_to_pigeons() -> None:
    errors = psycopg.errors
    assert isinstance(from_postgres(errors.DeadlockDetected("deadlock")), Contention)
    assert isinstance(from_postgres(errors.SerializationFailure("serialize")), Contention)
    assert isinstance(from_postgres(errors.LockNotAvailable("lock timeout")), LockTimeout)
    assert isinstance(from_postgres(errors.DiskFull("full")), StorageFull)
    assert type(from_postgres(errors.AdminShutdown("bye"))) is StoreUnavailable
    assert type(from_postgres(psycopg.OperationalError("refused"))) is StoreUnavailable
    own = errors.UndefinedColumn("no such column")
    assert from_postgres(own) is own  # the statement's own fault stays the driver's
    # Contention and LockTimeout are the store being unavailable (503 once retries ran out).
    assert store_down(Contention("x")) and store_down(LockTimeout("x"))
    assert lock_timed_out(LockTimeout("x")) and lock_timed_out(errors.LockNotAvailable("x"))
    assert is_full(StorageFull("x")) and is_full(errors.DiskFull("x"))


def test_a_lock_wait_run_out_leaves_the_transaction_as_lock_timeout(pg_url: str) -> None:
    db = open_server_db(pg_url)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with db.transaction() as tx:
            tx.sql("LOCK TABLE pigeon_schema IN ACCESS EXCLUSIVE MODE")
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        with pytest.raises(LockTimeout) as caught, db.transaction() as tx:
            tx.sql("SET LOCAL lock_timeout = '50ms'")
            tx.sql("SELECT * FROM pigeon_schema")
        assert isinstance(caught.value.__cause__, psycopg.errors.LockNotAvailable)
    finally:
        release.set()
        holder.join()
        db.close()


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_the_server_never_imports_a_driver() -> None:
    """Driver errors are classified in ``pigeon.storage.errors``; the server asks there."""
    offenders = {
        str(path.relative_to(SRC)): sorted(_imports(path) & {"sqlite3", "psycopg"})
        for path in sorted((SRC / "server").rglob("*.py"))
        if _imports(path) & {"sqlite3", "psycopg"}
    }
    assert offenders == {}


def test_the_servers_policy_never_branches_on_the_backend() -> None:
    """What differs per backend is said by the idempotency stores, not by the intake."""
    stores = {"idempotency_stores.py", "idempotency_memory.py"}
    offenders = [
        f"{path.relative_to(SRC)}:{n}"
        for path in sorted((SRC / "server").rglob("*.py"))
        if path.name not in stores
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ".backend ==" in line or ".backend !=" in line
    ]
    assert offenders == []

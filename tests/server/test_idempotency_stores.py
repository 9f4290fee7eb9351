"""The idempotency store of each backend (`pigeon.server.idempotency_stores`, and the
in-memory one of the unit tier): its read-only transaction, where the replay hooks run,
refuses every write and leaves nothing; its write transaction after it writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.server.idempotency import IdempotencyStore, SqlIdempotencyStore
from pigeon.server.idempotency_memory import MemoryIdempotencyStore
from pigeon.server.idempotency_stores import idempotency_store
from pigeon.storage.base import Tx
from tests.databases import opened


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[IdempotencyStore]:
    if request.param == "memory":
        yield MemoryIdempotencyStore()
        return
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else tmp_path / "db"
    for db in opened(url):
        yield idempotency_store(db)


def _claim(store: IdempotencyStore, tx: Tx, key: str) -> None:
    store.claim(
        tx, principal="ann", key=key, fingerprint="f", method="POST", path="/notes",
        operation_id=key,
    )  # fmt: skip


def test_a_read_only_transaction_refuses_a_claim_and_keeps_nothing(
    store: IdempotencyStore,
) -> None:
    # Each backend's own error: SQLite's readonly, PostgreSQL's READ ONLY, the memory's.
    with pytest.raises(Exception) as refused, store.read_only() as tx:
        _claim(store, tx, "k1")
    assert "read" in str(refused.value).lower()
    with store.transaction() as tx:
        assert store.get(tx, "ann", "k1") is None


def test_a_write_transaction_after_a_read_only_one_writes(store: IdempotencyStore) -> None:
    with store.read_only() as tx:
        assert store.get(tx, "ann", "k2") is None
    with store.transaction() as tx:  # SQLite's connection handed back writable
        _claim(store, tx, "k2")
    with store.read_only() as tx:
        row = store.get(tx, "ann", "k2")
    assert row is not None and row["state"] == "in_progress"


def test_the_claims_sql_alone_opens_no_transaction() -> None:
    # Bound to no database, it runs in its caller's (an application's) transactions only:
    # no read_only that would open a writable one.
    sql_alone = SqlIdempotencyStore()
    assert not hasattr(sql_alone, "transaction")
    assert not hasattr(sql_alone, "read_only")

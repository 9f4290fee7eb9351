"""``Tx.executemany`` (and ``Tx.sql_many``, the application's statements' own): a
statement run for each of many parameter sets in one call, and the rows it changed in all,
on every kind of transaction pigeon runs statements in (its own on SQLite and PostgreSQL,
one borrowed from the application's connection, and one over any DB-API connection). The
set-based batch counts the claims it took this way, and writes the notes' ledger rows
through ``QuerySet.run_rows``."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import psycopg
import pytest

from pigeon.reference import schema as ref
from pigeon.server.idempotency_sets import Answer, Ask
from pigeon.server.idempotency_stores import idempotency_store, set_claims
from pigeon.storage.base import Tx
from pigeon.storage.dbapi import DbapiTx
from pigeon.storage.errors import duplicate_row
from pigeon.storage.server import borrow, open_server_db, server_queries

Opened = Callable[[], AbstractContextManager[Tx]]


@pytest.fixture(params=["own", "borrowed", "dbapi"])
def opened(request: pytest.FixtureRequest, server_db_url: str) -> Iterator[Opened]:
    db = open_server_db(server_db_url)  # pigeon's tables
    ref.attach(db)  # and an application's: the reference app's
    postgres = server_db_url.startswith("postgresql")

    @contextmanager
    def transaction() -> Iterator[Tx]:
        if request.param == "own":
            with db.transaction() as tx:
                yield tx
            return
        if postgres:
            with psycopg.connect(server_db_url) as conn:  # commits at the block's end
                queries = server_queries("postgres")
                yield (
                    borrow(conn)
                    if request.param == "borrowed"
                    else DbapiTx(conn, "postgres", queries)
                )
            return
        conn = sqlite3.connect(server_db_url, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            queries = server_queries("sqlite")
            yield borrow(conn) if request.param == "borrowed" else DbapiTx(conn, "sqlite", queries)
            conn.execute("COMMIT")
        finally:
            conn.close()

    try:
        yield transaction
    finally:
        db.close()


def _revoke(name: str) -> dict[str, object]:
    return {"principal": name, "now": time.time(), "reason": "test"}


def test_executemany_counts_the_rows_it_changed(opened: Opened) -> None:
    with opened() as tx:
        assert tx.executemany("principal_revoke", [_revoke("a"), _revoke("b")]) == 2
    with opened() as tx:
        gone = [{"principal": name} for name in ("a", "c", "b", "d")]
        assert tx.executemany("principal_restore", gone) == 2  # c and d had no row
    with opened() as tx:
        assert tx.executemany("principal_restore", [{"principal": "a"}]) == 0


def test_a_batchs_claims_count_what_they_take_on_every_kind_of_transaction(
    opened: Opened, server_db_url: str
) -> None:
    # The set-based batch's claims run this way (on SQLite by position, one row each): a
    # count that came out wrong would give every batch up to the one-by-one way.
    db = open_server_db(server_db_url)
    claims = set_claims(idempotency_store(db))
    assert claims is not None
    asks = [Ask(f"k{i}", "f", "POST", "/notes", f"op{i}") for i in range(3)]
    try:
        with opened() as tx:
            found = claims.read_many(tx, "p", asks[:2])
            answers: list[Answer] = [(ask, 201, [], "{}") for ask in asks[:2]]
            assert claims.store_many(tx, "p", answers, found.now) == 2
        with opened() as tx:
            found = claims.read_many(tx, "p", asks)
            assert found.free.keys() == {"k2"} and sorted(found.held) == ["k0", "k1"]
        # k0 keeps its row: SQLite's statement leaves it out, PostgreSQL's fails, as each
        # kind of transaction raises it (either gives the batch up).
        answers = [(asks[2], 201, [], "{}"), (asks[0], 201, [], "{}")]
        if db.backend == "sqlite":
            with opened() as tx:
                assert claims.store_many(tx, "p", answers, found.now) == 1
        else:
            with pytest.raises(Exception) as raised, opened() as tx:
                claims.store_many(tx, "p", answers, found.now)
            assert duplicate_row(raised.value), raised.value
    finally:
        db.close()


def test_run_rows_writes_each_row_in_order_with_the_shared_values(opened: Opened) -> None:
    # SQLite steps a one-row statement (Tx.sql_many); PostgreSQL sends one JSON array.
    rows = [[f"k{i}", f"op{i}", f"note:n{i}", "POST", 201, i + 1, "0"] for i in (2, 0, 1)]
    with opened() as tx:
        assert ref.execute_rows(tx, "ledger_append_many", rows, principal="ann", now=5.0) == 3
        assert ref.execute_rows(tx, "ledger_append_many", [], principal="ann", now=5.0) == 0
    with opened() as tx:
        written = ref.fetchall(tx, "ledger_all", {"after": 0, "limit": 10})
    assert [r["idempotency_key"] for r in written] == ["k2", "k0", "k1"]
    assert [r["seq"] for r in written] == sorted(r["seq"] for r in written)
    first = written[0]
    assert (first["principal"], first["operation_id"], first["entity"]) == ("ann", "op2", "note:n2")
    assert (first["method"], first["status"], first["version"]) == ("POST", 201, 3)
    assert (first["clock"], first["applied_at"]) == ("0", 5.0)

"""The PostgreSQL connector: transactions, savepoints, migrations, refusal of newer schemas."""

from __future__ import annotations

import psycopg
import pytest

from pigeon.exceptions import SchemaTooNew, StoreUnavailable
from pigeon.storage.postgres import PostgresDatabase

QUERIES = {
    "make": "CREATE TABLE t (id integer PRIMARY KEY, v text)",
    "put": "INSERT INTO t (id, v) VALUES (%(id)s, %(v)s)",
    "all": "SELECT id, v FROM t ORDER BY id",
}


def test_commit_rollback_and_savepoint(pg_url: str) -> None:
    db = PostgresDatabase(pg_url, queries=QUERIES, components=())
    try:
        with db.transaction() as tx:
            tx.execute("make")
            tx.execute("put", {"id": 1, "v": "kept"})
            with pytest.raises(ZeroDivisionError), tx.savepoint():
                tx.execute("put", {"id": 2, "v": "rolled back to savepoint"})
                raise ZeroDivisionError
            tx.execute("put", {"id": 3, "v": "kept too"})
        with pytest.raises(RuntimeError), db.transaction() as tx:
            tx.execute("put", {"id": 4, "v": "whole transaction rolled back"})
            raise RuntimeError
        with db.transaction() as tx:
            assert tx.fetchall("all") == [{"id": 1, "v": "kept"}, {"id": 3, "v": "kept too"}]
    finally:
        db.close()


class Refused(Exception):
    pass


def test_bookkeeping_travels_with_the_statements_and_errors_stay_theirs(pg_url: str) -> None:
    never = "SELECT 1 / (SELECT count(*) FROM t WHERE id < 0) AS x"  # fails: nothing matches
    db = PostgresDatabase(pg_url, queries=QUERIES | {"never": never}, components=())
    try:
        with db.transaction() as tx:
            tx.execute("make")
            tx.execute("put", {"id": 1, "v": "kept"})
            with pytest.raises(psycopg.errors.UniqueViolation), tx.savepoint():
                tx.execute("put", {"id": 1, "v": "a duplicate, rolled back to the savepoint"})
            with tx.savepoint(), tx.savepoint():
                pass  # nothing ran: nothing sent
            with pytest.raises(Refused), tx.savepoint():
                tx.finish_with("never", {}, Refused())
                raise Refused  # its statement never left: forgotten with the savepoint
            tx.finish_with("put", {"id": 2, "v": "sent with the COMMIT"}, Refused())
        with pytest.raises(Refused), db.transaction() as tx:
            tx.execute("put", {"id": 3, "v": "rolled back: the last statement failed"})
            tx.finish_with("never", {}, Refused())
        with db.transaction() as tx:
            assert [r["id"] for r in tx.fetchall("all")] == [1, 2]
        with db.connection() as conn:  # handed back as the pool lends it
            assert not conn.autocommit
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    finally:
        db.close()


def test_a_deferred_statement_travels_with_the_next_round_trip(pg_url: str) -> None:
    db = PostgresDatabase(pg_url, queries=QUERIES, components=())
    put = QUERIES["put"]
    try:
        with db.transaction() as tx:
            tx.execute("make")
        with db.transaction() as tx:
            tx.defer(put, {"id": 1, "v": "alone: sent with BEGIN and the COMMIT"})
        with db.transaction() as tx:
            tx.execute("all")  # begun
            with pytest.raises(Refused), tx.savepoint():
                tx.defer(put, {"id": 2, "v": "never sent: rolled back with the savepoint"})
                raise Refused
            tx.defer(put, {"id": 3, "v": "sent with the next statement"})
            assert [r["id"] for r in tx.fetchall("all")] == [1, 3]
            tx.defer(put, {"id": 4, "v": "sent with the COMMIT"})
        with pytest.raises(psycopg.errors.UniqueViolation), db.transaction() as tx:
            tx.defer(put, {"id": 5, "v": "rolled back with the one beside it"})
            tx.defer(put, {"id": 1, "v": "a duplicate: its error is the COMMIT's"})
        with db.transaction() as tx:
            assert [r["id"] for r in tx.fetchall("all")] == [1, 3, 4]
    finally:
        db.close()


def test_newer_schema_is_refused_and_untouched(pg_url: str) -> None:
    db = PostgresDatabase(pg_url, queries=QUERIES, components=("server",))
    db.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE pigeon_schema SET version = 999 WHERE component = 'server'")
    with pytest.raises(SchemaTooNew, match="999"):
        PostgresDatabase(pg_url, queries=QUERIES, components=("server",))
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT version FROM pigeon_schema").fetchone()
        assert row == (999,)


def test_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(StoreUnavailable, match="cannot connect"):
        PostgresDatabase(
            "postgresql://postgres@127.0.0.1:1/none", queries=QUERIES, components=(), timeout=1
        )

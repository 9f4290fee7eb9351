"""The intake in a transaction the application opened on its own connection.

``Intake.execute(principal, op, tx=borrow(conn))``: the claim, the handler's writes,
pigeon's record and job and the stored response go into the application's transaction
beside its own write; the application commits (all of it) or rolls back (none of it,
and the key is free for the retry). On SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pigeon import jobs
from pigeon.exceptions import ConfigurationError
from pigeon.server.intake import Intake, IntakeContext
from pigeon.server.operations import OperationRequest
from pigeon.storage.base import Database
from pigeon.storage.server import borrow, open_server_db


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        notes_pg: str = request.getfixturevalue("pg_url")
        return notes_pg
    return str(tmp_path / "app.db")


@contextmanager
def app_connection(url: str) -> Iterator[Any]:
    """The application's own connection, with its own (tuple) rows."""
    if url.startswith("postgresql"):
        with psycopg.connect(url) as conn:  # not autocommit: a transaction per block
            yield conn
    else:
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()


def begin(conn: Any) -> None:
    if isinstance(conn, sqlite3.Connection):
        conn.execute("BEGIN IMMEDIATE")


def count(notes_db: Database, table: str) -> int:
    with notes_db.transaction() as tx:
        row = tx.sql(f"SELECT count(*) AS n FROM {table}").fetchone()
    return int(row["n"])


def accept_order(ctx: IntakeContext) -> tuple[int, Any]:
    spec = jobs.JobSpec("orders", "ship", {"order": ctx.body["id"]})
    rid = jobs.records.accept(
        ctx.tx, kind="order", data=ctx.body, obligations={"ship": spec}, principal=ctx.principal
    )
    return 202, {"status": "received", "record": rid}


def order(key: str) -> OperationRequest:
    return OperationRequest("POST", "/orders", {"id": key}, key, f"op-{key}")


def test_the_claim_and_the_jobs_commit_or_roll_back_with_the_applications_writes(
    url: str,
) -> None:
    notes_db = open_server_db(url)  # migrates: pigeon's tables beside the application's
    try:
        with notes_db.transaction() as tx:
            tx.sql("CREATE TABLE app_orders (id text PRIMARY KEY)")
        intake = Intake(notes_db)
        intake.add_operation("POST", "/orders", accept_order)
        with app_connection(url) as conn:
            begin(conn)
            conn.execute("INSERT INTO app_orders (id) VALUES ('o1')")
            first = intake.execute("alice", order("o1"), tx=borrow(conn))
            assert first.status == 202
            conn.rollback()  # the application changed its mind: nothing of it is kept
            assert count(notes_db, "app_orders") == 0 and count(notes_db, "pigeon_jobs") == 0
            with notes_db.transaction() as tx:
                assert intake.store.get(tx, "alice", "o1") is None  # the retry runs

            begin(conn)
            conn.execute("INSERT INTO app_orders (id) VALUES ('o1')")
            second = intake.execute("alice", order("o1"), tx=borrow(conn))
            assert second.status == 202 and not second.replayed
            conn.commit()  # one commit: the order, the claim, the record, its job
        assert count(notes_db, "app_orders") == 1 and count(notes_db, "pigeon_jobs") == 1
        replay = intake.execute("alice", order("o1"))  # the intake's own transaction
        assert replay.replayed and replay.body == second.body
    finally:
        notes_db.close()


def test_a_refusal_leaves_the_applications_transaction_usable(url: str) -> None:
    notes_db = open_server_db(url)
    try:
        with notes_db.transaction() as tx:
            tx.sql("CREATE TABLE app_log (line text)")
        intake = Intake(notes_db)
        intake.add_operation("POST", "/orders", accept_order)
        with notes_db.transaction() as tx:  # the key already used for another request
            decision = intake.store.claim(
                tx,
                principal="alice",
                key="k",
                fingerprint="another",
                method="POST",
                path="/orders",
                operation_id="op-0",
            )
            assert decision.claim is not None
        with app_connection(url) as conn:
            begin(conn)
            refused = intake.execute("alice", order("k"), tx=borrow(conn))
            assert refused.status in (409, 422)  # in progress (lock not expired) or reused
            conn.execute("INSERT INTO app_log (line) VALUES ('still usable')")
            conn.commit()
        assert count(notes_db, "app_log") == 1 and count(notes_db, "pigeon_jobs") == 0
    finally:
        notes_db.close()


def test_borrow_refuses_a_connection_outside_a_transaction(url: str) -> None:
    notes_db = open_server_db(url)
    notes_db.close()
    with app_connection(url) as conn:
        if isinstance(conn, psycopg.Connection):
            conn.autocommit = True
        with pytest.raises(ConfigurationError, match="transaction"):
            borrow(conn)
    with pytest.raises(TypeError):
        borrow(object())

"""On PostgreSQL, ``@pigeon.idempotent`` adds one round trip to a request: the key's claim.
The stored answer goes with the COMMIT (psycopg's pipeline mode), and a statement that
fails there leaves nothing committed. Counted on the wire (tests/pgwire.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import create_engine, make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from pigeon.demo.processes import serve_in_thread
from pigeon.integrations.claims import COMPLETE_LAST, Claims
from pigeon.integrations.fastapi import defer, defer_async
from pigeon.integrations.fastapi.sessions import SessionWork
from pigeon.server.idempotency import SqlIdempotencyStore, StoredResponse
from pigeon.server.results import OpResult
from pigeon.storage import postgres
from pigeon.storage.server import borrow, server_queries
from tests.integrations.orders_app import Order, counts, create_app, prepare, sqlalchemy_url
from tests.pgwire import Counts, RoundTrips

pytestmark = pytest.mark.postgres


def _relayed(url: str, relay: RoundTrips) -> str:
    return str(make_url(url).set(host="127.0.0.1", port=relay.port))


def _bare_sync(url: str, relay: RoundTrips) -> Counts:
    """The handler's own writes, and its commit, without pigeon."""
    engine = create_engine(sqlalchemy_url(_relayed(url, relay)), pool_size=1)
    try:
        for attempt in ("warm", "count"):
            with relay.counting() as counted, Session(engine) as db:
                row = Order(owner="ada", item=attempt)
                db.add(row)
                db.flush()
                defer(db, queue="payments", task="charge", payload={"order": row.id})
                db.commit()
        return counted
    finally:
        engine.dispose()


async def _bare_async(url: str, relay: RoundTrips) -> Counts:
    engine = create_async_engine(sqlalchemy_url(_relayed(url, relay), asynchronous=True))
    try:
        for attempt in ("warm", "count"):
            with relay.counting() as counted:
                async with AsyncSession(engine) as db:
                    row = Order(owner="ada", item=attempt)
                    db.add(row)
                    await db.flush()
                    payload = {"order": row.id}
                    await defer_async(db, queue="payments", task="charge", payload=payload)
                    await db.commit()
        return counted
    finally:
        await engine.dispose()


def test_pigeon_adds_one_round_trip_the_claim(pg_url: str, mode: str) -> None:
    prepare(pg_url)
    info = make_url(pg_url)
    relay = RoundTrips((info.host or "127.0.0.1", info.port or 5432))
    try:
        if mode == "sync":
            bare = _bare_sync(pg_url, relay)
        else:
            bare = asyncio.run(_bare_async(pg_url, relay))
        app = create_app(_relayed(pg_url, relay), asynchronous=mode == "async")
        with serve_in_thread(app) as base, httpx.Client(base_url=base, timeout=30) as client:
            for attempt in ("warm", "count"):
                key = {"Idempotency-Key": attempt, "X-User": "ada"}
                with relay.counting() as guarded:
                    assert (
                        client.post("/orders", json={"item": "x"}, headers=key).status_code == 201
                    )
    finally:
        relay.close()
    # BEGIN, the order's INSERT, the job's, COMMIT; pigeon: the claim, and its answer
    # with the COMMIT.
    assert guarded.turns == bare.turns + 1, (bare, guarded)
    assert guarded.statements == bare.statements + 2, (bare, guarded)
    assert counts(pg_url) == {"orders": 4, "jobs": 4, "claims": 2}


def _claimed(conn: psycopg.Connection[Any], store: SqlIdempotencyStore) -> Any:
    decision = store.claim(
        borrow(conn),
        principal="ada",
        key="k",
        fingerprint="f",
        method="POST",
        path="/orders",
        operation_id="op",
    )
    assert decision.claim is not None
    return decision.claim


def test_the_answer_sent_with_the_commit_commits_both(pg_url: str) -> None:
    prepare(pg_url)
    store = SqlIdempotencyStore()
    with psycopg.connect(pg_url) as conn:
        claim = _claimed(conn, store)
        conn.execute("INSERT INTO orders (owner, item) VALUES ('ada', 'tea')")
        params = store.completion(borrow(conn).cipher, claim, StoredResponse(201, "{}"))
        postgres.commit_with(conn, server_queries("postgres")[COMPLETE_LAST], params)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert counts(pg_url) == {"orders": 1, "jobs": 0, "claims": 1}
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT state, status FROM pigeon_idempotency_claims").fetchall() == [
            ("completed", 201)
        ]


def test_an_answer_that_stores_nothing_leaves_nothing_committed(pg_url: str) -> None:
    """A claim no longer this transaction's (another token): the statement fails, and the
    COMMIT sent behind it in the same round trip does not happen."""
    prepare(pg_url)
    store = SqlIdempotencyStore()
    with psycopg.connect(pg_url) as conn:
        claim = _claimed(conn, store)
        conn.execute("INSERT INTO orders (owner, item) VALUES ('ada', 'tea')")
        params = store.completion(borrow(conn).cipher, claim, StoredResponse(201, "{}"))
        statement = server_queries("postgres")[COMPLETE_LAST]
        with pytest.raises(psycopg.errors.DivisionByZero):
            postgres.commit_with(conn, statement, params | {"lock_token": "not ours"})
        conn.rollback()
    assert counts(pg_url) == {"orders": 0, "jobs": 0, "claims": 0}


def test_a_session_that_joins_the_applications_transaction_stores_the_answer_in_it(
    pg_url: str,
) -> None:
    """A session bound to the application's own connection only joins its transaction
    (a savepoint): its commit is not the COMMIT, so the answer is written before it."""
    prepare(pg_url)
    claims = Claims()
    engine = create_engine(sqlalchemy_url(pg_url))
    try:
        with engine.connect() as conn:
            outer = conn.begin()
            session = Session(bind=conn, join_transaction_mode="create_savepoint")
            work = SessionWork(session)
            decision = work.run(
                lambda tx: claims.store.claim(
                    tx, principal="ada", key="k", fingerprint="f", method="POST",
                    path="/orders", operation_id="op",
                )
            )  # fmt: skip
            assert decision.claim is not None
            session.add(Order(owner="ada", item="tea"))
            work.commit(claims.keep(decision.claim, OpResult(201, "{}")))
            outer.commit()
    finally:
        engine.dispose()
    assert counts(pg_url) == {"orders": 1, "jobs": 0, "claims": 1}
    with psycopg.connect(pg_url) as check:
        stored = check.execute("SELECT state, status FROM pigeon_idempotency_claims")
        assert stored.fetchall() == [("completed", 201)]

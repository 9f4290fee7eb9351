"""A deadlock victim (or a serialization failure) on PostgreSQL is retried in place.

PostgreSQL breaks a deadlock by aborting one of the transactions in it, and that
transaction is meant to be run again: nothing of it committed, and the other one has
gone on. Answering it 503 "store unavailable" sent the client into its backoff (seconds)
for what the server settles in milliseconds, and said the store was down when it was not.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg

from pigeon.exceptions import StoreUnavailable
from pigeon.reference import schema as ref
from pigeon.reference.notes import create_note
from pigeon.reference.notes_reads import read_ledger
from pigeon.server.app import create_app
from pigeon.server.intake import HandlerResult, Intake, IntakeContext
from pigeon.storage.base import Database
from pigeon.storage.errors import contended, store_down

from .conftest import live_server


class Crossing:
    """Handlers that update notes ``a`` and ``b`` in opposite orders, meeting in between
    on their first attempt: a guaranteed deadlock, one victim."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=10)
        self.attempts: dict[str, int] = {}
        self.lock = threading.Lock()

    def handler(self, first: str, second: str) -> Any:
        def run(ctx: IntakeContext) -> HandlerResult:
            with self.lock:
                self.attempts[ctx.idempotency_key] = self.attempts.get(ctx.idempotency_key, 0) + 1
                attempt = self.attempts[ctx.idempotency_key]
            _touch(ctx, first)
            if attempt == 1:
                self.barrier.wait()  # both hold their first row now
            _touch(ctx, second)
            return 200, {"moved": [first, second], "attempt": attempt}

        return run


def _touch(ctx: IntakeContext, note_id: str) -> None:
    params = {
        "principal": ctx.principal,
        "id": note_id,
        "data": "{}",
        "deleted": 0,
        "clock": ctx.clock,
        "now": ctx.now,
    }
    assert ref.fetchone(ctx.tx, "note_write", params) is not None


def _seed(intake: Intake) -> None:
    for note in ("a", "b"):
        intake.add_operation("POST", f"/seed/{note}", create_note)
    with live_server(create_app(intake, purge_interval=None)) as url, httpx.Client() as client:
        for note in ("a", "b"):
            sent = client.post(
                f"{url}/seed/{note}", json={"id": note}, headers={"Idempotency-Key": note}
            )
            assert sent.status_code == 201


def test_a_deadlock_victim_is_retried_in_place_not_answered_503(notes_pg: Database) -> None:
    crossing = Crossing()
    intake = Intake(notes_pg)
    intake.add_operation("POST", "/ab", crossing.handler("a", "b"))
    intake.add_operation("POST", "/ba", crossing.handler("b", "a"))
    _seed(intake)
    with live_server(create_app(intake, purge_interval=None)) as url:

        def send(path: str) -> httpx.Response:
            with httpx.Client(base_url=url, timeout=30) as client:
                return client.post(path, json={}, headers={"Idempotency-Key": path})

        with ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(send, ["/ab", "/ba"]))
    assert [r.status_code for r in replies] == [200, 200], [r.text for r in replies]
    # One of them was the victim and ran again; each effect committed once.
    assert sorted(crossing.attempts.values()) == [1, 2]
    assert sorted(r.json()["attempt"] for r in replies) == [1, 2]
    assert len(read_ledger(notes_pg)) == 2  # the two seeds; the crossing handlers write no ledger


def test_a_deadlock_inside_a_batch_retries_the_batch_transaction(notes_pg: Database) -> None:
    crossing = Crossing()
    intake = Intake(notes_pg)
    intake.add_operation("POST", "/ab", crossing.handler("a", "b"))
    intake.add_operation("POST", "/ba", crossing.handler("b", "a"))
    intake.add_operation("POST", "/notes", create_note)
    _seed(intake)
    batch = {
        "operations": [
            {"idempotency_key": "n1", "method": "POST", "path": "/notes", "body": {"id": "n1"}},
            {"idempotency_key": "/ab", "method": "POST", "path": "/ab", "body": {}},
        ]
    }
    with live_server(create_app(intake, purge_interval=None)) as url:

        def send_batch() -> httpx.Response:
            with httpx.Client(base_url=url, timeout=30) as client:
                return client.post("/pigeon/v1/batch", json=batch)

        def send_single() -> httpx.Response:
            with httpx.Client(base_url=url, timeout=30) as client:
                return client.post("/ba", json={}, headers={"Idempotency-Key": "/ba"})

        with ThreadPoolExecutor(2) as pool:
            batched, single = pool.submit(send_batch), pool.submit(send_single)
            batch_reply, single_reply = batched.result(), single.result()
    assert single_reply.status_code == 200, single_reply.text
    assert batch_reply.status_code == 200, batch_reply.text
    assert [r["status"] for r in batch_reply.json()["results"]] == [201, 200]
    assert sorted(crossing.attempts.values()) == [1, 2]
    # The note the batch created before its deadlock is there once: the retried
    # transaction ran it again from nothing, it did not replay a half-committed one.
    assert [e["idempotency_key"] for e in read_ledger(notes_pg)] == ["a", "b", "n1"]


def test_contention_is_told_from_an_outage() -> None:
    deadlock = psycopg.errors.DeadlockDetected("deadlock detected")
    wrapped = StoreUnavailable("PostgreSQL unavailable")
    wrapped.__cause__ = deadlock
    assert contended(deadlock) and contended(wrapped)
    assert contended(psycopg.errors.SerializationFailure("could not serialize"))
    assert not contended(psycopg.OperationalError("connection refused"))
    assert not contended(StoreUnavailable("every pooled connection was dead"))


def test_a_postgres_statements_own_error_is_not_the_store_being_down() -> None:
    errors = psycopg.errors
    assert store_down(psycopg.OperationalError("server closed the connection"))  # no state
    assert store_down(errors.AdminShutdown("terminating connection"))
    assert store_down(errors.TooManyConnections("too many clients"))
    assert store_down(errors.LockNotAvailable("lock timeout"))
    assert store_down(errors.DeadlockDetected("deadlock detected"))
    assert store_down(StoreUnavailable("every pooled connection was dead"))
    assert not store_down(errors.ProgramLimitExceeded("index row size exceeds maximum"))
    assert not store_down(errors.UndefinedColumn("no such column"))

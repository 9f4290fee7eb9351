"""The idempotency store of each backend (``pigeon.server.idempotency.IdempotencyStore``),
and ``idempotency_store(db)``, which picks the one for a database.

SQLite and PostgreSQL share the claims' code (``SqlIdempotencyStore``: statements asked
for by name); what differs is said here, once: how a read-only transaction is opened
(SQLite: a deferred BEGIN, so replay reads never queue for the one write lock, and a
connection setting put back afterwards; PostgreSQL: ``SET TRANSACTION READ ONLY``), and
whether write transactions run one at a time (SQLite), which makes group commit pay, and
which stores claim a batch's keys at once, and how (`set_claims`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager

from pigeon.core.wire import canonical_json
from pigeon.server.idempotency import (
    CLAIM_WAIT,
    IdempotencyPolicy,
    IdempotencyStore,
    KeyBusy,
    SqlIdempotencyStore,
    held_if_free,
)
from pigeon.server.idempotency_memory import MemoryDatabase, MemoryIdempotencyStore
from pigeon.server.idempotency_sets import SetClaims
from pigeon.storage.base import Database, Tx
from pigeon.storage.errors import lock_timed_out
from pigeon.storage.queries import QuerySet
from pigeon.storage.sqlite import SQLiteDatabase

_INTAKE = QuerySet("intake")  # the claims' own statements, by backend


class _BoundSqlStore(SqlIdempotencyStore):
    """The claims' SQL bound to ``db``, in whose transactions it also runs alone (the
    replay hooks' reads, the per-operation path's claims)."""

    def __init__(
        self,
        db: Database,
        policy: IdempotencyPolicy | None = None,
        *,
        now: Callable[[], float] = time.time,
        claim_wait: float = CLAIM_WAIT,
    ) -> None:
        super().__init__(policy, now=now, claim_wait=claim_wait)
        self.db = db

    def transaction(self) -> AbstractContextManager[Tx]:
        return self.db.transaction()

    def turn_at_once(self) -> AbstractContextManager[bool]:
        return contextlib.nullcontext(False)


class SQLiteIdempotencyStore(_BoundSqlStore):
    """Claims in a SQLite file: one writer at a time."""

    single_writer = True

    def turn_at_once(self) -> AbstractContextManager[bool]:
        # The file's write lock, among this process's threads and pigeon's processes
        # (where no file lock can be had, writer_lock's note, SQLite's busy wait is left
        # to meet another process). A database wrapped in another object: no turn.
        if isinstance(self.db, SQLiteDatabase):
            return held_if_free(self.db.writer)
        return contextlib.nullcontext(False)

    @contextlib.contextmanager
    def read_only(self) -> Iterator[Tx]:
        with self.db.reading() as tx:
            tx.execute("replay_read_only")
            try:
                yield tx
            finally:  # a connection setting on SQLite: hand it back writable
                tx.execute("replay_read_write")


class PostgresIdempotencyStore(_BoundSqlStore):
    """Claims in PostgreSQL: many processes, transactions side by side."""

    @contextlib.contextmanager
    def read_only(self) -> Iterator[Tx]:
        with self.db.reading() as tx:
            tx.execute("replay_read_only")
            yield tx


def idempotency_store(
    db: Database,
    policy: IdempotencyPolicy | None = None,
    *,
    now: Callable[[], float] | None = None,
    claim_wait: float = CLAIM_WAIT,
) -> IdempotencyStore:
    """The idempotency store for ``db`` (SQLite, PostgreSQL or ``MemoryDatabase``)."""
    if isinstance(db, MemoryDatabase):
        return MemoryIdempotencyStore(db, policy, now=now, claim_wait=claim_wait)
    kind = SQLiteIdempotencyStore if db.backend == "sqlite" else PostgresIdempotencyStore
    return kind(db, policy, now=now or time.time, claim_wait=claim_wait)


class SQLiteSetClaims(SetClaims):
    """A batch's claims in SQLite: the one writer waits for nobody, and each statement is
    stepped for every row in one call (``Tx.executemany``), its row count what it did."""

    def stored(
        self, tx: Tx, principal: str, rows: list[list[object]], times: Mapping[str, float]
    ) -> int:
        created, expires = times["created_at"], times["claim_expires_at"]
        now, kept = times["now"], times["response_expires_at"]
        return tx.executemany(
            "claims_store_many", [(principal, *row, created, now, kept, expires) for row in rows]
        )


class PostgresSetClaims(SetClaims):
    """A batch's claims in PostgreSQL: a key another transaction claimed and has not
    committed yet is waited for as long as one claim waits (``claim_wait``), then
    ``KeyBusy``. On pigeon's own transaction the statement travels with the next round
    trip, the COMMIT's most often, its count unread: it stores every row or fails, and a
    failure there (a duplicate key, the wait run out) rolls the transaction back and gives
    the attempt up (`intake_set.commit_set`)."""

    def __init__(self, store: SqlIdempotencyStore) -> None:
        super().__init__(store.policy, store.now)
        self.wait = f"{max(1, round(store.claim_wait * 1000))}ms"

    def stored(
        self, tx: Tx, principal: str, rows: list[list[object]], times: Mapping[str, float]
    ) -> int:
        params = {"principal": principal, "claims": canonical_json(rows), "claim_wait": self.wait}
        if hasattr(tx, "defer"):  # pigeon's own transaction (`PostgresTx`)
            _INTAKE.run_later(tx, "claims_store_many", {**params, **times})
            return len(rows)
        try:
            row = tx.fetchone("claims_store_many", {**params, **times})
        except Exception as exc:
            if lock_timed_out(exc):
                raise KeyBusy("a key of the batch") from exc
            raise
        assert row is not None
        return int(row["taken"])


def set_claims(store: IdempotencyStore) -> SetClaims | None:
    """The batch-at-once claims of ``store`` (`pigeon.server.idempotency_sets`), or None where
    its batches run one operation at a time (the memory store)."""
    if isinstance(store, SQLiteIdempotencyStore):
        return SQLiteSetClaims(store.policy, store.now)
    if isinstance(store, PostgresIdempotencyStore):
        return PostgresSetClaims(store)
    return None

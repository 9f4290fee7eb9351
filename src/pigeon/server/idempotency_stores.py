"""The idempotency store of each backend (``pigeon.server.idempotency.IdempotencyStore``),
and ``idempotency_store(db)``, which picks the one for a database.

SQLite and PostgreSQL share the claims' code (``SqlIdempotencyStore``: statements asked
for by name); what differs is said here, once: how a read-only transaction is opened
(SQLite: a deferred BEGIN, so replay reads never queue for the one write lock, and a
connection setting put back afterwards; PostgreSQL: ``SET TRANSACTION READ ONLY``), and
whether write transactions run one at a time (SQLite), which makes group commit pay.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

from pigeon.server.idempotency import (
    CLAIM_WAIT,
    IdempotencyPolicy,
    IdempotencyStore,
    SqlIdempotencyStore,
)
from pigeon.server.idempotency_memory import MemoryDatabase, MemoryIdempotencyStore
from pigeon.storage.base import Database, Tx
from pigeon.storage.sqlite import SQLiteDatabase


class SQLiteIdempotencyStore(SqlIdempotencyStore):
    """Claims in a SQLite file: one writer at a time."""

    single_writer = True

    @contextlib.contextmanager
    def read_only(self) -> Iterator[Tx]:
        db = self.db
        if isinstance(db, SQLiteDatabase):
            context: AbstractContextManager[Tx] = db.transaction(immediate=False)
        else:  # a wrapper, whose BEGIN IMMEDIATE only costs the lock
            context = db.transaction()
        with context as tx:
            tx.execute("replay_read_only")
            try:
                yield tx
            finally:  # a connection setting on SQLite: hand it back writable
                tx.execute("replay_read_write")


class PostgresIdempotencyStore(SqlIdempotencyStore):
    """Claims in PostgreSQL: many processes, transactions side by side."""

    @contextlib.contextmanager
    def read_only(self) -> Iterator[Tx]:
        with self.db.transaction() as tx:
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
    if now is None:
        return kind(policy, claim_wait=claim_wait, db=db)
    return kind(policy, now=now, claim_wait=claim_wait, db=db)

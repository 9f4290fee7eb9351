"""The implementations of ``pigeon.jobs.store.JobStore``: SQLite, PostgreSQL, in-memory.

``store_for(db)`` gives the jobs store of a storage ``Database`` (or hands back the
``JobStore`` it is given); ``session_for(tx)`` the jobs session on a storage ``Tx`` the
caller opened and commits (the intake's, in which ``records.accept`` writes its jobs).
Both pick the implementation by the ``backend`` that the storage protocols declare, from
a registry; the PostgreSQL store (and psycopg with it) is imported only for a PostgreSQL
database. Each session class here implements every role of ``pigeon.jobs.store``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pigeon.jobs.store import JobStore
from pigeon.jobs.stores.memory import MemoryJobSession, MemoryJobStore, memory_session
from pigeon.jobs.stores.sqlite import SqliteJobStore, SqlJobSession
from pigeon.storage.base import Database, Tx

__all__ = [
    "BuiltinSession",
    "BuiltinStore",
    "MemoryJobStore",
    "SqliteJobStore",
    "session_for",
    "store_for",
]

S = TypeVar("S")

# One of pigeon's own stores and sessions: each serves every role (the PostgreSQL ones
# are SQL ones, with their own statements where PostgreSQL does better).
BuiltinSession = SqlJobSession | MemoryJobSession
BuiltinStore = JobStore[BuiltinSession]


def _postgres_store(db: Database) -> BuiltinStore:
    from pigeon.jobs.stores.postgres import PostgresJobStore

    return PostgresJobStore(db)


def _postgres_session(tx: Tx) -> BuiltinSession:
    from pigeon.jobs.stores.postgres import PostgresJobSession

    return PostgresJobSession(tx)


# By the ``backend`` of the storage ``Database`` / ``Tx``.
STORES: dict[str, Callable[[Database], BuiltinStore]] = {
    "sqlite": SqliteJobStore,
    "postgres": _postgres_store,
}
SESSIONS: dict[str, Callable[[Tx], BuiltinSession]] = {
    "sqlite": SqlJobSession,
    "postgres": _postgres_session,
    "memory": memory_session,
}


def store_for(db: Database | JobStore[S]) -> JobStore[S] | BuiltinStore:
    """The jobs store of ``db``: a storage ``Database`` (pigeon's ``SQLiteDatabase`` /
    ``PostgresDatabase``, or another with their ``backend``), or a ``JobStore`` already
    (returned as is)."""
    if isinstance(db, JobStore):
        return db
    make = STORES.get(db.backend)
    if make is None:
        raise TypeError(f"no jobs store for backend {db.backend!r} ({type(db).__name__})")
    return make(db)


def session_for(tx: Tx) -> BuiltinSession:
    """The jobs session on an open storage transaction (its owner commits it)."""
    make = SESSIONS.get(tx.backend)
    if make is None:
        raise TypeError(f"no jobs session for backend {tx.backend!r} ({type(tx).__name__})")
    return make(tx)

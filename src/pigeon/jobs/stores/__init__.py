"""The implementations of ``pigeon.jobs.store.JobStore``: SQLite, PostgreSQL, in-memory.

``store_for(db)`` gives the jobs store of a storage ``Database`` (or hands back the
``JobStore`` it is given); ``session_for(tx)`` the jobs session on a transaction the
caller opened and commits (the intake's, in which ``records.accept`` writes its jobs).
The PostgreSQL store (and psycopg with it) is imported only for a PostgreSQL database.
"""

from __future__ import annotations

from typing import Any

from pigeon.jobs.store import JobSession, JobStore
from pigeon.jobs.stores.memory import MemoryJobSession, MemoryJobStore
from pigeon.jobs.stores.sqlite import SqliteJobStore, SqlJobSession
from pigeon.storage.sqlite import SQLiteDatabase, SQLiteTx

__all__ = ["MemoryJobStore", "SqliteJobStore", "session_for", "store_for"]


def store_for(db: Any) -> JobStore:
    """The jobs store of ``db``: pigeon's ``SQLiteDatabase`` / ``PostgresDatabase`` (or
    another object with a storage ``Database``'s methods and ``backend``), or a
    ``JobStore`` already (returned as is)."""
    if isinstance(db, (MemoryJobStore, SqliteJobStore)):
        return db
    if isinstance(db, SQLiteDatabase):
        return SqliteJobStore(db)
    backend = getattr(db, "backend", None)
    if backend == "sqlite":
        return SqliteJobStore(db)
    from pigeon.jobs.stores.postgres import PostgresJobStore

    if isinstance(db, PostgresJobStore):
        return db
    if backend == "postgres":
        return PostgresJobStore(db)
    raise TypeError(f"no jobs store for {type(db).__name__}")


def session_for(tx: Any) -> JobSession:
    """The jobs session on an open transaction: a storage ``Tx`` (its owner commits it)
    or a ``JobSession`` already."""
    if isinstance(tx, (SqlJobSession, MemoryJobSession)):  # PostgresJobSession included
        return tx
    if isinstance(tx, SQLiteTx):
        return SqlJobSession(tx)
    backend = getattr(tx, "backend", None)
    if backend == "sqlite":
        return SqlJobSession(tx)
    if backend == "postgres":
        from pigeon.jobs.stores.postgres import PostgresJobSession

        return PostgresJobSession(tx)
    raise TypeError(f"no jobs session for {type(tx).__name__}")

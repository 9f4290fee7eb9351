"""The implementations of ``pigeon.jobs.store.JobStore``: SQLite, PostgreSQL, in-memory.

``store_for(db)`` gives the jobs store of a storage ``Database`` (or hands back the
``JobStore`` it is given); ``session_for(tx)`` the jobs session on a transaction the
caller opened and commits (the intake's, in which ``records.accept`` writes its jobs)."""

from __future__ import annotations

from typing import Any

from pigeon.jobs.store import JobSession, JobStore
from pigeon.jobs.stores.memory import MemoryJobSession, MemoryJobStore
from pigeon.jobs.stores.postgres import PostgresJobSession, PostgresJobStore
from pigeon.jobs.stores.sqlite import SqliteJobStore, SqlJobSession
from pigeon.storage.postgres import PostgresDatabase, PostgresTx
from pigeon.storage.sqlite import SQLiteDatabase, SQLiteTx

__all__ = [
    "MemoryJobStore",
    "PostgresJobStore",
    "SqliteJobStore",
    "session_for",
    "store_for",
]


def store_for(db: Any) -> JobStore:
    """The jobs store of ``db``: pigeon's ``SQLiteDatabase`` / ``PostgresDatabase``, or a
    ``JobStore`` already (returned as is)."""
    if isinstance(db, (MemoryJobStore, SqliteJobStore, PostgresJobStore)):
        return db
    if isinstance(db, SQLiteDatabase):
        return SqliteJobStore(db)
    if isinstance(db, PostgresDatabase):
        return PostgresJobStore(db)
    # Another object with the storage Database's methods (a wrapper of pigeon's).
    if getattr(db, "backend", None) == "postgres":
        return PostgresJobStore(db)
    if getattr(db, "backend", None) == "sqlite":
        return SqliteJobStore(db)
    raise TypeError(f"no jobs store for {type(db).__name__}")


def session_for(tx: Any) -> JobSession:
    """The jobs session on an open transaction: a storage ``Tx`` (its owner commits it)
    or a ``JobSession`` already."""
    if isinstance(tx, (SqlJobSession, MemoryJobSession)):
        return tx
    if isinstance(tx, PostgresTx):
        return PostgresJobSession(tx)
    if isinstance(tx, SQLiteTx):
        return SqlJobSession(tx)
    # Another object with the storage Tx's methods (a wrapper of pigeon's transactions).
    if getattr(tx, "backend", None) == "postgres":
        return PostgresJobSession(tx)
    if getattr(tx, "backend", None) == "sqlite":
        return SqlJobSession(tx)
    raise TypeError(f"no jobs session for {type(tx).__name__}")

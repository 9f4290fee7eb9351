"""Open the server database named by a URL: a SQLite path (default) or postgresql://..."""

from __future__ import annotations

import os
import sqlite3
from functools import cache
from typing import Any

from pigeon.exceptions import ConfigurationError
from pigeon.extras import require_extra
from pigeon.storage.base import Database, Tx
from pigeon.storage.crypto import Keyring, cipher_for
from pigeon.storage.queries import load_queries
from pigeon.storage.sqlite import BorrowedSQLiteTx, Durability, SQLiteDatabase

SERVER_APPLICATION_ID = 0x50474E53  # "PGNS": a pigeon server database
SERVER_COMPONENTS = ("intake", "jobs")  # the query sets of the library's server


@cache
def server_queries(backend: str) -> dict[str, str]:
    merged: dict[str, str] = {}
    for component in SERVER_COMPONENTS:
        try:
            queries = load_queries(backend, component)
        except FileNotFoundError:
            continue
        clash = merged.keys() & queries.keys()
        if clash:
            raise RuntimeError(f"query names defined by two components: {sorted(clash)}")
        merged.update(queries)
    return merged


def open_server_db(
    url: str | os.PathLike[str],
    *,
    durability: Durability = "full",
    keyring: Keyring | None = None,
) -> Database:
    """``keyring``: seal stored responses, job payloads and errors, record and note data
    with it (`pigeon.storage.crypto`); None stores them as they are."""
    text = os.fspath(url)
    cipher = cipher_for(keyring)
    if text.startswith(("postgresql://", "postgres://")):
        require_extra("postgres", "a PostgreSQL database")
        from pigeon.storage.postgres import PostgresDatabase  # psycopg only when asked for

        return PostgresDatabase(text, queries=server_queries("postgres"), cipher=cipher)
    return SQLiteDatabase(
        text,
        application_id=SERVER_APPLICATION_ID,
        components=("server",),
        queries=server_queries("sqlite"),
        durability=durability,
        cipher=cipher,
    )


def borrow(conn: Any, *, keyring: Keyring | None = None) -> Tx:
    """pigeon's ``Tx`` over a transaction the application opened on its own connection
    (a ``sqlite3.Connection`` or a ``psycopg.Connection``) and will commit or roll back
    itself: ``Intake.execute(principal, op, tx=borrow(conn))`` then puts the key's claim,
    the handler's writes, the jobs and the stored response in the application's
    transaction, beside its own writes, in one commit. pigeon begins, commits and rolls
    back nothing of it (savepoints only). The database must hold pigeon's tables: open it
    once with ``open_server_db``, which migrates it.

    A SQLite connection must be in its transaction already (``BEGIN``, or a first write
    under Python's implicit transactions); a psycopg connection either not in autocommit
    or inside ``conn.transaction()``. ``keyring``: the one the database's other openers
    seal with (``open_server_db(..., keyring=)``), so what is written here is sealed too."""
    cipher = cipher_for(keyring)
    if isinstance(conn, sqlite3.Connection):
        if not conn.in_transaction:
            raise ConfigurationError(
                "borrow() needs the connection's transaction open (BEGIN first): pigeon "
                "commits nothing of a transaction it borrows"
            )
        return BorrowedSQLiteTx(conn, server_queries("sqlite"), cipher)
    try:
        from pigeon.storage import postgres
    except ImportError:  # psycopg not installed: it cannot be a psycopg connection
        postgres = None  # type: ignore[assignment]
    if postgres is not None and postgres.borrowable(conn):
        if not postgres.in_transaction(conn):
            raise ConfigurationError(
                "borrow() needs a transaction: a connection not in autocommit, or "
                "inside conn.transaction(); pigeon commits nothing of it"
            )
        return postgres.BorrowedPostgresTx(conn, server_queries("postgres"), cipher)
    raise TypeError(f"borrow() takes a sqlite3 or psycopg connection, not {type(conn).__name__}")

"""Open the server database named by a URL: a SQLite path (default) or postgresql://..."""

from __future__ import annotations

import os
import sqlite3
from functools import cache
from typing import Any

from pigeon.exceptions import ConfigurationError
from pigeon.extras import require_extra
from pigeon.storage.base import Database, Tx
from pigeon.storage.crypto import Cipher, Keyring, cipher_for
from pigeon.storage.dbapi import DbapiTx
from pigeon.storage.queries import load_queries
from pigeon.storage.schema import Component, apply_component
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


def borrow(
    conn: Any, *, keyring: Keyring | None = None, via: Any = None, begin: bool = False
) -> Tx:
    """pigeon's ``Tx`` over a transaction the application opened on its own connection
    (a ``sqlite3.Connection`` or a ``psycopg.Connection``) and will commit or roll back
    itself: ``Intake.execute(principal, op, tx=borrow(conn))`` then puts the key's claim,
    the handler's writes, the jobs and the stored response in the application's
    transaction, beside its own writes, in one commit. pigeon begins, commits and rolls
    back nothing of it (savepoints only). The database must hold pigeon's tables: open it
    once with ``open_server_db``, which migrates it (or ``pigeon migrate``).

    A SQLite connection must be in its transaction already (``BEGIN``, or a first write
    under Python's implicit transactions); a psycopg connection either not in autocommit
    or inside ``conn.transaction()``. ``begin=True``: a SQLite connection whose driver has
    not begun yet (Python's module begins at the first write, SQLAlchemy's pysqlite
    leaves it so) is begun here with ``BEGIN IMMEDIATE``, the application still ending it.
    ``keyring``: the one the database's other openers seal with (``open_server_db(...,
    keyring=)``), so what is written here is sealed too.

    ``via``: for an asyncio connection (psycopg's ``AsyncConnection``, aiosqlite's), the
    synchronous DB-API adapter over it through which the statements run (SQLAlchemy's,
    inside ``AsyncSession.run_sync``)."""
    cipher = cipher_for(keyring)
    if via is not None:
        return _borrow_adapted(conn, via, cipher, begin)
    if isinstance(conn, sqlite3.Connection):
        if begin and not conn.in_transaction:
            conn.execute("BEGIN IMMEDIATE")
        if not conn.in_transaction:
            raise ConfigurationError(
                "borrow() needs the connection's transaction open (BEGIN first): pigeon "
                "commits nothing of a transaction it borrows"
            )
        return BorrowedSQLiteTx(conn, server_queries("sqlite"), cipher)
    postgres = _postgres()
    if postgres is not None and postgres.borrowable(conn):
        if not postgres.in_transaction(conn):
            raise ConfigurationError(
                "borrow() needs a transaction: a connection not in autocommit, or "
                "inside conn.transaction(); pigeon commits nothing of it"
            )
        borrowed: Tx = postgres.BorrowedPostgresTx(conn, server_queries("postgres"), cipher)
        return borrowed
    raise TypeError(f"borrow() takes a sqlite3 or psycopg connection, not {type(conn).__name__}")


def _postgres() -> Any:
    try:
        from pigeon.storage import postgres
    except ImportError:  # psycopg not installed: it cannot be a psycopg connection
        return None
    return postgres


def _borrow_adapted(conn: Any, via: Any, cipher: Cipher, begin: bool) -> Tx:
    """``borrow`` of an asyncio connection through its synchronous adapter ``via``."""
    postgres = _postgres()
    if postgres is not None and postgres.borrowable_async(conn):
        return DbapiTx(via, "postgres", server_queries("postgres"), cipher)
    if type(conn).__module__.partition(".")[0] == "aiosqlite":
        if begin and not conn.in_transaction:
            via.cursor().execute("BEGIN IMMEDIATE")
        return DbapiTx(via, "sqlite", server_queries("sqlite"), cipher)
    raise TypeError(
        "borrow(via=) takes psycopg's AsyncConnection or aiosqlite's, not "
        f"{type(conn).__module__}.{type(conn).__name__} (asyncpg's adapter speaks another "
        "parameter style: use postgresql+psycopg with SQLAlchemy's AsyncSession)"
    )


def migrate_borrowed(conn: Any, *, via: Any = None) -> int:
    """Create or upgrade pigeon's server tables through the application's own connection,
    in its transaction (the application commits): a migration the application runs, an
    Alembic revision or ``pigeon migrate``. Returns the schema version.

    A SQLite file that is nobody's yet (no application_id, no user_version) is marked a
    pigeon server database too, so that ``pigeon worker --db`` opens it as
    ``open_server_db`` opens its own; one another application marked keeps its marks."""
    tx = borrow(conn, via=via, begin=True)
    version = apply_component(tx, Component("server"))
    if tx.backend == "sqlite":
        app_id = tx.sql("PRAGMA application_id").fetchone()
        user_version = tx.sql("PRAGMA user_version").fetchone()
        assert app_id is not None and user_version is not None
        ours = int(app_id["application_id"]) == SERVER_APPLICATION_ID
        if ours or (int(app_id["application_id"]) == 0 and int(user_version["user_version"]) == 0):
            tx.sql(f"PRAGMA application_id = {SERVER_APPLICATION_ID}")
            tx.sql(f"PRAGMA user_version = {int(version)}")
    return version


def migrate_url(url: str) -> int:
    """``migrate_borrowed`` on a connection of its own to ``url`` (a SQLite path or a
    ``postgresql://`` URL), committed: ``pigeon migrate --db URL``."""
    if url.startswith(("postgresql://", "postgres://")):
        require_extra("postgres", "a PostgreSQL database")
        import psycopg

        with psycopg.connect(url) as pg:  # leaving the block commits
            return migrate_borrowed(pg)
    path = url.removeprefix("sqlite:///")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = migrate_borrowed(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("PRAGMA journal_mode = WAL")
        return version
    finally:
        conn.close()

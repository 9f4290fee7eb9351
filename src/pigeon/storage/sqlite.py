"""SQLite plumbing shared by the edge queue and the server store.

One connection per thread (sqlite3 connections are not shared across threads), WAL,
``BEGIN IMMEDIATE`` for every write transaction so a writer takes the lock up front
instead of failing half-way on upgrade. The file is identified by ``application_id``:
a file of another application, or one written by a newer pigeon, is refused with a clear
error and never rewritten (`pigeon.storage.sqlite_schema`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

from pigeon.exceptions import ForeignDatabase, StorageFull, StoreUnavailable
from pigeon.storage import deadline
from pigeon.storage.base import Params
from pigeon.storage.crypto import PLAIN, Cipher
from pigeon.storage.errors import is_full
from pigeon.storage.files import private_file
from pigeon.storage.schema import Component, migrate_component
from pigeon.storage.sqlite_schema import check_and_migrate
from pigeon.storage.writer_lock import WriterLock

T = TypeVar("T")

Durability = Literal["full", "normal"]
Row = dict[str, Any]

_SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}
_BUSY_MS = 30_000  # a writer waits this long for another process's lock, without a deadline


# The column names of the last description read, by that description: a cursor keeps one
# description for all its rows, so the names are made once per statement, not per row.
_last_names: tuple[Any, tuple[str, ...]] = (None, ())


def _dict_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Row:
    # Naming each row's columns anew cost ~1 us a row, as much as sqlite3 reading it; a
    # batch reads a row or two an operation. One tuple, swapped whole: safe across threads.
    global _last_names
    description, names = _last_names
    if cursor.description is not description:
        description = cursor.description
        names = tuple(col[0] for col in description)
        _last_names = (description, names)
    return dict(zip(names, row, strict=True))


def full(exc: BaseException, path: str) -> StorageFull:
    return StorageFull(
        f"{path}: the database or disk is full; nothing of the transaction was written ({exc})"
    )


def connect(path: str | os.PathLike[str], durability: Durability = "full") -> sqlite3.Connection:
    if durability not in _SYNCHRONOUS:
        raise ValueError(f"durability must be 'full' or 'normal', not {durability!r}")
    conn = sqlite3.connect(
        os.fspath(path), isolation_level=None, check_same_thread=False, timeout=30.0
    )
    conn.row_factory = _dict_row
    conn.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[durability]}")
    return conn


class SQLiteTx:
    """An open write transaction on one connection, with named queries and savepoints."""

    backend = "sqlite"

    def __init__(
        self, conn: sqlite3.Connection, queries: Mapping[str, str], cipher: Cipher = PLAIN
    ) -> None:
        self.conn = conn
        self.queries = queries
        self.cipher = cipher  # seals the columns that hold what users wrote
        self._depth = 0

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> sqlite3.Cursor:
        return self.conn.execute(self.queries[name], params or {})

    def fetchone(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        row: Row | None = self.execute(name, params).fetchone()
        return row

    def tuples(self, name: str, params: Mapping[str, Any] | None = None) -> sqlite3.Cursor:
        """``execute`` on a cursor whose rows are plain tuples: for hot paths, where the
        connection's dict row factory costs more than the read itself."""
        cursor = self.conn.cursor()
        cursor.row_factory = None
        return cursor.execute(self.queries[name], params or {})

    def fetchall(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        rows: list[Row] = self.execute(name, params).fetchall()
        return rows

    def executemany(self, name: str, params: Sequence[Params]) -> int:
        return self.sql_many(self.queries[name], params)

    def sql_many(self, statement: str, params: Sequence[Params]) -> int:
        return self.conn.executemany(statement, params).rowcount

    def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> sqlite3.Cursor:
        """The application's own statement (see `pigeon.storage.base.Tx.sql`)."""
        return self.conn.execute(statement, params or {})

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        # Named by depth, not by a counter: a savepoint per operation of a batch with a
        # fresh name each was a new SQL text each, which missed sqlite3's statement cache
        # (128 entries) and pushed the named queries out of it, so every statement of the
        # batch was parsed again. Nested savepoints still have distinct names (and a name
        # repeated by a second SQLiteTx on the connection means its innermost savepoint).
        self._depth += 1
        name = f"sp_{self._depth}"
        try:
            self.conn.execute(f"SAVEPOINT {name}")
            try:
                yield
            except BaseException:
                # SQLITE_FULL (among others) may have rolled back the whole transaction,
                # and the savepoint with it: ROLLBACK TO would then hide the cause.
                if self.conn.in_transaction:
                    self.conn.execute(f"ROLLBACK TO {name}")
                    self.conn.execute(f"RELEASE {name}")
                raise
            self.conn.execute(f"RELEASE {name}")
        finally:
            self._depth -= 1


class BorrowedSQLiteTx(SQLiteTx):
    """``SQLiteTx`` over the application's own connection, in a transaction it opened
    and will end (``pigeon.storage.server.borrow``): rows as dicts whatever the
    connection's row factory, which stays the application's."""

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> sqlite3.Cursor:
        return self.sql(self.queries[name], params)

    def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> sqlite3.Cursor:
        cursor = self.conn.cursor()
        cursor.row_factory = _dict_row
        return cursor.execute(statement, params or {})


class SQLiteDatabase:
    """A SQLite file with per-thread connections and named queries of one or more components."""

    backend = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        application_id: int,
        components: tuple[str, ...],
        queries: Mapping[str, str],
        durability: Durability = "full",
        create: bool = True,
        pragmas: Mapping[str, str | int] | None = None,
        page_size: int | None = None,
        upgrade: bool = True,
        cipher: Cipher = PLAIN,
    ) -> None:
        self.path = os.fspath(path)
        self.durability: Durability = durability
        self.queries = queries
        self.cipher = cipher
        # Extra per-connection settings, applied to every connection. Savepoints (each
        # operation's, a set-based batch's, the edge's group commit) journal the pages they
        # touch: in memory, as a temporary file cost a batch ~9 us an operation in writes.
        self.pragmas = {"temp_store": "MEMORY", **(pragmas or {})}
        self._busy_ms = int(self.pragmas.get("busy_timeout", _BUSY_MS))  # put back after a deadline
        self._local = threading.local()
        self._all: dict[sqlite3.Connection, threading.Thread] = {}  # each with its thread
        self._all_lock = threading.Lock()
        # One writer at a time, among threads and pigeon's processes (pigeon.storage.
        # writer_lock): handed over as soon as a commit is done, where SQLite's busy
        # handler would sleep on.
        self._writer = WriterLock(self.path, wait=self._busy_ms / 1000)
        self._closed = False
        if not create and not os.path.exists(self.path):
            raise StoreUnavailable(f"{self.path}: no such file")
        if create:
            private_file(self.path)  # 0600 before SQLite writes a byte (and its -wal/-shm)
        conn = self.connection()
        try:
            # The first component is the file's own (its application_id, its header's
            # version); any other is attached beside it (`pigeon.storage.schema`).
            own, *attached = components
            check_and_migrate(
                conn,
                application_id=application_id,
                component=own,
                path=path,
                create=create,
                page_size=page_size,
                upgrade=upgrade,
            )
            for component in attached:
                migrate_component(self, Component(component))
        except BaseException:
            self.close()  # a refused file keeps no descriptor (nor -wal/-shm) open on it
            raise

    @property
    def writer(self) -> WriterLock:
        """The file's write lock (every write transaction holds it): holding it keeps this
        process's writers, and pigeon's in other processes, waiting."""
        return self._writer

    def connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # Only here, off the hot path: close() drops every thread's connection.
            # Opening a new one would quietly reuse a store its owner let go of (its
            # locks and owner token released, so another process may take over).
            if self._closed:
                raise StoreUnavailable(f"{self.path}: this store was closed")
            try:
                conn = connect(self.path, self.durability)
            except sqlite3.DatabaseError as exc:
                # The first pragma reads the header: "file is not a database" lands here.
                if "not a database" in str(exc):
                    raise ForeignDatabase(f"{self.path} is not a SQLite database: {exc}") from exc
                raise StoreUnavailable(f"cannot open {self.path}: {exc}") from exc
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"cannot open {self.path}: {exc}") from exc
            for name, value in self.pragmas.items():
                conn.execute(f"PRAGMA {name} = {value}")
            self._local.conn = conn
            with self._all_lock:
                self._close_orphans()
                self._all[conn] = threading.current_thread()
        return conn

    def _close_orphans(self) -> None:
        """Close the connections of threads that have ended. A thread pool's idle workers
        exit and new ones take their place (anyio's after 10 s idle): each kept its
        connection, two file descriptors, until close(), and a server with bursty traffic
        ran out of descriptors. Called with ``_all_lock`` held, as a connection is made:
        thread churn is what makes connections, so it is also what collects them."""
        for conn, owner in list(self._all.items()):
            if not owner.is_alive():
                del self._all[conn]
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    @contextlib.contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[SQLiteTx]:
        conn = self.connection()
        if immediate:
            self._take_writer()
        try:
            self._begin(conn, "BEGIN IMMEDIATE" if immediate else "BEGIN")
            try:
                yield SQLiteTx(conn, self.queries, self.cipher)
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:  # a failed COMMIT included: nothing half-kept
                    conn.execute("ROLLBACK")
                # The driver's error, mapped here for every store.
                if is_full(exc) and not isinstance(exc, StorageFull):
                    raise full(exc, self.path) from exc
                raise
        finally:
            if immediate:
                self._writer.release()

    def reading(self) -> contextlib.AbstractContextManager[SQLiteTx]:
        """A read transaction (``Database.reading``): a deferred BEGIN, outside the write
        lock, on its snapshot of the file."""
        return self.transaction(immediate=False)

    def run_in_transaction(self, work: Callable[[SQLiteTx], T]) -> T:
        """``work(tx)`` in one write transaction: what ``with transaction() as tx`` does,
        without a generator context manager, which costs more Python than a one-row
        INSERT (every enqueue of the edge queue comes here)."""
        conn = self.connection()
        self._take_writer()
        try:
            self._begin(conn, "BEGIN IMMEDIATE")
            try:
                result = work(SQLiteTx(conn, self.queries, self.cipher))
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:  # a failed COMMIT included: nothing half-kept
                    conn.execute("ROLLBACK")
                if is_full(exc) and not isinstance(exc, StorageFull):
                    raise full(exc, self.path) from exc
                raise
        finally:
            self._writer.release()
        return result

    def _take_writer(self) -> None:
        """The process's write lock, waited for no longer than the thread's deadline."""
        remaining = deadline.left()
        if remaining is None:
            self._writer.acquire()
        elif not remaining or not self._writer.acquire(timeout=remaining):
            raise deadline.expired(f"the write lock of {self.path}")

    def _begin(self, conn: sqlite3.Connection, begin: str) -> None:
        """``begin``, whose wait for another process's write lock (the busy handler) ends
        by the thread's deadline, if it has one."""
        remaining = deadline.left()
        if remaining == 0:  # past it: nothing more is asked, as on PostgreSQL
            raise deadline.expired(f"a transaction on {self.path}")
        if remaining is None or remaining * 1000 >= self._busy_ms:  # the busy wait ends first
            conn.execute(begin)
            return
        conn.execute(f"PRAGMA busy_timeout = {int(remaining * 1000)}")
        try:
            conn.execute(begin)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY and deadline.left() == 0:
                raise deadline.expired(f"the write lock of {self.path}") from exc
            raise
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")

    def read(self) -> SQLiteTx:
        """Autocommit access for single-statement reads (WAL: never blocked by the writer)."""
        return SQLiteTx(self.connection(), self.queries, self.cipher)

    def close(self) -> None:
        self._closed = True
        with self._all_lock:
            for conn in self._all:  # the keys
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._all.clear()
        self._local = threading.local()
        self._writer.close()

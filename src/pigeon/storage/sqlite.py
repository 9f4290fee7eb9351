"""SQLite plumbing shared by the edge queue and the server store.

One connection per thread (sqlite3 connections are not shared across threads), WAL,
``BEGIN IMMEDIATE`` for every write transaction so a writer takes the lock up front
instead of failing half-way on upgrade. The file is identified by ``application_id``:
a file of another application, or one written by a newer pigeon, is refused with a clear
error and never rewritten.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, TypeVar

from pigeon.exceptions import ForeignDatabase, SchemaTooNew, StoreUnavailable
from pigeon.storage.queries import migrations

T = TypeVar("T")

Durability = Literal["full", "normal"]
Row = dict[str, Any]

_SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}


def _dict_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Row:
    return {col[0]: value for col, value in zip(cursor.description, row, strict=True)}


def connect(path: str | os.PathLike[str], durability: Durability = "full") -> sqlite3.Connection:
    if durability not in _SYNCHRONOUS:
        raise ValueError(f"durability must be 'full' or 'normal', not {durability!r}")
    conn = sqlite3.connect(
        os.fspath(path), isolation_level=None, check_same_thread=False, timeout=30.0
    )
    conn.row_factory = _dict_row
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[durability]}")
    return conn


def check_and_migrate(
    conn: sqlite3.Connection,
    *,
    application_id: int,
    component: str,
    path: str | os.PathLike[str],
    create: bool = True,
    page_size: int | None = None,
) -> int:
    """Verify the file is ours (or empty) and bring its schema up to date. Returns version.

    ``page_size`` applies to a new (empty) file only: SQLite fixes the page size when the
    first page is written, so an existing file keeps the one it was made with."""
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()["application_id"]
        version = int(conn.execute("PRAGMA user_version").fetchone()["user_version"])
        tables = conn.execute(
            "SELECT count(*) AS n FROM sqlite_master WHERE type = 'table'"
        ).fetchone()["n"]
    except sqlite3.DatabaseError as exc:
        raise ForeignDatabase(f"{os.fspath(path)} is not a SQLite database: {exc}") from exc
    if app_id != application_id and (app_id != 0 or tables > 0):
        raise ForeignDatabase(
            f"{os.fspath(path)} is not a pigeon {component} database "
            f"(application_id={app_id:#x}, expected {application_id:#x}); refusing to touch it"
        )
    steps = migrations("sqlite", component)
    latest = len(steps)
    if version > latest:
        raise SchemaTooNew(
            f"{os.fspath(path)} has schema version {version}, newer than this pigeon "
            f"knows ({latest}); upgrade pigeon, the file was not changed"
        )
    if version == latest:
        return latest
    if not create and tables == 0:
        raise ForeignDatabase(f"{os.fspath(path)} is not a pigeon {component} database (empty)")
    if page_size is not None and tables == 0 and version == 0:
        # Before journal_mode: switching to WAL writes the header, which fixes the size.
        conn.execute(f"PRAGMA page_size = {int(page_size)}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Re-read under the write lock: another process may have migrated meanwhile.
        version = int(conn.execute("PRAGMA user_version").fetchone()["user_version"])
        for number, script in steps[version:]:
            for statement in _split_statements(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        conn.execute(f"PRAGMA application_id = {application_id}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return latest


def _split_statements(script: str) -> list[str]:
    """Split a migration into statements (executescript would commit our transaction)."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


class SQLiteTx:
    """An open write transaction on one connection, with named queries and savepoints."""

    backend = "sqlite"

    def __init__(self, conn: sqlite3.Connection, queries: Mapping[str, str]) -> None:
        self.conn = conn
        self.queries = queries
        self._depth = 0

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> sqlite3.Cursor:
        return self.conn.execute(self.queries[name], params or {})

    def fetchone(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        row: Row | None = self.execute(name, params).fetchone()
        return row

    def fetchall(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        rows: list[Row] = self.execute(name, params).fetchall()
        return rows

    def executemany(self, name: str, params: list[Mapping[str, Any]]) -> None:
        self.conn.executemany(self.queries[name], params)

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
                self.conn.execute(f"ROLLBACK TO {name}")
                self.conn.execute(f"RELEASE {name}")
                raise
            self.conn.execute(f"RELEASE {name}")
        finally:
            self._depth -= 1


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
    ) -> None:
        self.path = os.fspath(path)
        self.durability: Durability = durability
        self.queries = queries
        # Extra per-connection settings (e.g. temp_store), applied to every connection.
        self.pragmas = dict(pragmas or {})
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        # One writer per process at a time. SQLite would serialise our threads anyway, but
        # a BEGIN IMMEDIATE that finds the file locked waits in the busy handler, which
        # sleeps in steps of milliseconds; a lock hands over as soon as the commit is done.
        # Other processes still meet the busy timeout. Reentrant, so a nested BEGIN gets
        # SQLite's own error rather than a deadlock.
        self._writer = threading.RLock()
        if not create and not os.path.exists(self.path):
            raise StoreUnavailable(f"{self.path}: no such file")
        conn = self.connection()
        for component in components:
            check_and_migrate(
                conn,
                application_id=application_id,
                component=component,
                path=path,
                create=create,
                page_size=page_size,
            )

    @property
    def writer(self) -> threading.RLock:
        """The process's write lock (every write transaction holds it): holding it keeps
        this process's writers waiting."""
        return self._writer

    def connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
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
                self._all.append(conn)
        return conn

    @contextlib.contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[SQLiteTx]:
        conn = self.connection()
        lock = self._writer if immediate else contextlib.nullcontext()
        with lock:
            conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            try:
                yield SQLiteTx(conn, self.queries)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # a failed COMMIT included: nothing half-kept
                    conn.execute("ROLLBACK")
                raise

    def run_in_transaction(self, work: Callable[[SQLiteTx], T]) -> T:
        """``work(tx)`` in one write transaction: what ``with transaction() as tx`` does,
        without a generator context manager, which costs more Python than a one-row
        INSERT (every enqueue of the edge queue comes here)."""
        conn = self.connection()
        with self._writer:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = work(SQLiteTx(conn, self.queries))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # a failed COMMIT included: nothing half-kept
                    conn.execute("ROLLBACK")
                raise
        return result

    def read(self) -> SQLiteTx:
        """Autocommit access for single-statement reads (WAL: never blocked by the writer)."""
        return SQLiteTx(self.connection(), self.queries)

    def close(self) -> None:
        with self._all_lock:
            for conn in self._all:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._all.clear()
        self._local = threading.local()

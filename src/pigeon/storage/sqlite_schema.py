"""Whose SQLite file this is, and its own component's schema brought up to date.

The file's header names its owner (``application_id``) and its own component's schema
version (``user_version``, also recorded in ``pigeon_schema`` beside any other
component's: `pigeon.storage.schema`). A file of another application, or one written by
a newer pigeon, is refused with a clear error and never rewritten; a new one is made
WAL and migrated in one write transaction, judged again under the write lock.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import NamedTuple

from pigeon.exceptions import ForeignDatabase, SchemaTooNew, SchemaTooOld, StoreUnavailable
from pigeon.storage.queries import migrations
from pigeon.storage.schema import VERSION_TABLE, run_sqlite_script


class Header(NamedTuple):
    app_id: int  # PRAGMA application_id: whose file this is
    version: int  # PRAGMA user_version: the file's own component's schema version
    objects: int  # schema objects of any kind
    recorded: int | None  # the component's row in pigeon_schema (None: none yet)


def _read_header(conn: sqlite3.Connection, component: str) -> Header:
    app_id = int(conn.execute("PRAGMA application_id").fetchone()["application_id"])
    version = int(conn.execute("PRAGMA user_version").fetchone()["user_version"])
    objects = int(conn.execute("SELECT count(*) AS n FROM sqlite_master").fetchone()["n"])
    recorded = None
    if conn.execute(_HAS_VERSION_TABLE).fetchone() is not None:
        row = conn.execute(_RECORDED, {"component": component}).fetchone()
        recorded = None if row is None else int(row["version"])
    return Header(app_id, version, objects, recorded)


_HAS_VERSION_TABLE = (
    "SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = 'pigeon_schema'"
)
_RECORDED = "SELECT version FROM pigeon_schema WHERE component = :component"
_RECORD = (
    "INSERT INTO pigeon_schema (component, version) VALUES (:component, :version) "
    "ON CONFLICT (component) DO UPDATE SET version = excluded.version"
)


def _header(conn: sqlite3.Connection, component: str) -> Header:
    """The header, read in one snapshot: several autocommit reads could straddle another
    process's migration and see its tables without its application_id."""
    conn.execute("BEGIN")
    try:
        return _read_header(conn, component)
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _judge(header: Header, application_id: int, component: str, path: str, latest: int) -> bool:
    """Refuse a file that is not ours or is newer than we know; True if it is brand new.

    New means nothing at all: no application_id, no user_version, no schema object of
    any kind (a view, an index or a version number alone make it someone else's)."""
    app_id, version, objects, _recorded = header
    fresh = app_id == 0 and version == 0 and objects == 0
    if app_id != application_id and not fresh:
        raise ForeignDatabase(
            f"{path} is not a pigeon {component} database "
            f"(application_id={app_id:#x}, expected {application_id:#x}); refusing to touch it"
        )
    if version > latest:
        raise SchemaTooNew(
            f"{path} has schema version {version}, newer than this pigeon "
            f"knows ({latest}); upgrade pigeon, the file was not changed"
        )
    return fresh


def _use_wal(conn: sqlite3.Connection, timeout: float = 30.0) -> None:
    """Switch to WAL unless the file already is. Two processes making one new file both
    try; SQLite answers one of them SQLITE_BUSY at once, without its busy handler, so
    wait here as a write would."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()["journal_mode"] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def check_and_migrate(
    conn: sqlite3.Connection,
    *,
    application_id: int,
    component: str,
    path: str | os.PathLike[str],
    create: bool = True,
    page_size: int | None = None,
    upgrade: bool = True,
) -> int:
    """Verify the file is ours (or empty) and bring its own component's schema (the one
    ``application_id`` names) up to date. Returns the version.

    The version is the header's ``user_version``, kept for older pigeons, and is recorded
    in ``pigeon_schema`` beside any other component's (`pigeon.storage.schema`): a file
    that has the header's number alone (written before the table) gets its row here, once.

    ``upgrade=False``: an older schema is refused (SchemaTooOld) instead of migrated, and
    nothing is written (a file without its row keeps the header's number alone).

    ``page_size`` applies to a new (empty) file only: SQLite fixes the page size when the
    first page is written, so an existing file keeps the one it was made with."""
    name = os.fspath(path)
    steps = migrations("sqlite", component)
    latest = len(steps)
    try:
        header = _header(conn, component)
    except sqlite3.DatabaseError as exc:
        if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_NOTADB:
            raise ForeignDatabase(f"{name} is not a SQLite database: {exc}") from exc
        raise StoreUnavailable(f"cannot read {name}: {exc}") from exc
    fresh = _judge(header, application_id, component, name, latest)
    if header.version == latest and (header.recorded == latest or not upgrade):
        return latest
    if not create and fresh:
        raise ForeignDatabase(f"{name} is not a pigeon {component} database (empty)")
    if not upgrade and not fresh:
        raise SchemaTooOld(
            f"{name} has schema version {header.version}, older than this pigeon's ({latest}); "
            "the file was not changed: the application that owns it upgrades it when it opens it"
        )
    if page_size is not None and fresh:
        # Before journal_mode: switching to WAL writes the header, which fixes the size.
        conn.execute(f"PRAGMA page_size = {int(page_size)}")
    _use_wal(conn)
    _migrate_locked(conn, steps, application_id=application_id, component=component, path=name)
    return latest


def _migrate_locked(
    conn: sqlite3.Connection,
    steps: list[tuple[int, str]],
    *,
    application_id: int,
    component: str,
    path: str,
) -> None:
    """The steps past the file's version, its version in the header and in pigeon_schema,
    in one write transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Judged again under the write lock: another process (perhaps a newer pigeon) may
        # have created or migrated the file meanwhile.
        header = _read_header(conn, component)
        _judge(header, application_id, component, path, len(steps))
        for number, script in steps[header.version :]:
            run_sqlite_script(conn.execute, script)
            conn.execute(f"PRAGMA user_version = {number}")
        conn.execute(VERSION_TABLE)
        conn.execute(_RECORD, {"component": component, "version": len(steps)})
        conn.execute(f"PRAGMA application_id = {application_id}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise

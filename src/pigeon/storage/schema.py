"""Schema components, each with its own numbered migrations and its own recorded version.

A component is a set of tables that one part of the code owns: the server's (``server``),
the edge queue's (``edge``), an application's beside them (the reference application's
``reference``, in its own package). Its migrations are ``<package>/sql/<backend>/migrations/
<component>_NNNN.sql``, numbered from 1 without gaps, so two components never compete for a
number, and each component's version is recorded on its own in one table of the database,
``pigeon_schema(component, version)``, on both backends.

SQLite's header holds a single number (``user_version``). It stays the version of the
file's own component (the one its ``application_id`` names): older pigeons read it, and
refuse a file newer than they know. The table records every component's version, that one's
too; a file written before the table existed has only the header, and its first migration
by this pigeon records the header's number in the table (`pigeon.storage.sqlite`).

A component attached to an open database (`migrate_component`) is migrated through an
ordinary write transaction: it works through any ``Database`` of either backend, wrappers
included, and two processes attaching at once take turns (SQLite's one writer, a
PostgreSQL advisory lock).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pigeon.exceptions import ConfigurationError, SchemaTooNew
from pigeon.storage.base import Database, Tx
from pigeon.storage.queries import LIBRARY, load_queries, migrations

VERSION_TABLE = """CREATE TABLE IF NOT EXISTS pigeon_schema (
    component text PRIMARY KEY,
    version integer NOT NULL
)"""

# One migrator at a time across processes on PostgreSQL (held to the transaction's end).
MIGRATE_LOCK = zlib.crc32(b"pigeon-migrate")

_RECORD = (
    "INSERT INTO pigeon_schema (component, version) VALUES ({c}, {v}) "
    "ON CONFLICT (component) DO UPDATE SET version = excluded.version"
)
_READ = "SELECT version FROM pigeon_schema WHERE component = {c}"
# Each backend's parameter style: the statements above are written once for both.
_STYLE = {
    "sqlite": {"c": ":component", "v": ":version"},
    "postgres": {"c": "%(component)s", "v": "%(version)s"},
}

_NAME = re.compile(r"[a-z][a-z0-9]*")

# A migration that only moves what an earlier pigeon made (renames of its old tables): in a
# new database it is skipped, for an application's own table may have such a name there
# (pigeon's tables live beside the application's, `pigeon.integrations`).
UPGRADE_ONLY = re.compile(r"^-- pigeon: upgrade only$", re.MULTILINE)


@dataclass(frozen=True)
class Component:
    """A named set of tables with its own migrations (and named queries) in ``package``."""

    name: str
    package: str = LIBRARY

    def __post_init__(self) -> None:
        # Lower-case letters and digits: the name prefixes its files as ``<name>_NNNN.sql``,
        # and an underscore in it would let one component's files pass for another's.
        if not _NAME.fullmatch(self.name):
            raise ConfigurationError(
                f"a schema component's name is lower-case letters and digits, not {self.name!r}"
            )

    def migrations(self, backend: str) -> list[tuple[int, str]]:
        return migrations(backend, self.name, self.package)

    def queries(self, backend: str) -> dict[str, str]:
        return load_queries(backend, self.name, self.package)


def split_statements(script: str) -> list[str]:
    """Split a SQLite migration into statements (``executescript`` would commit the
    migrating transaction). A block of comments alone is no statement."""
    import sqlite3  # the standard library's, for its statement-completeness test only

    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    statements.append(buffer.strip())
    return [s for s in statements if not _only_comments(s)]


def _only_comments(statement: str) -> bool:
    return all(
        not line.strip() or line.lstrip().startswith("--") for line in statement.splitlines()
    )


# PostgreSQL's ``ALTER TABLE IF EXISTS``, which SQLite lacks: the migrations of both
# backends say it the same way, and on SQLite the statement runs only if the table exists.
_ALTER_IF_EXISTS = re.compile(r"ALTER\s+TABLE\s+IF\s+EXISTS\s+(\w+)\s+", re.IGNORECASE)


def run_sqlite_script(execute: Callable[[str, Mapping[str, Any]], Any], script: str) -> None:
    """Run one SQLite migration, statement by statement, through ``execute(sql, params)``
    (a connection's or a transaction's), inside the caller's transaction."""
    for statement in split_statements(script):
        # The statement without the comment lines before it (a migration's explanations).
        lines = statement.splitlines()
        while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
            lines.pop(0)
        statement = "\n".join(lines)
        guarded = _ALTER_IF_EXISTS.match(statement)
        if guarded is not None:
            table = guarded.group(1)
            found = execute(
                "SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = :name",
                {"name": table},
            ).fetchone()
            if found is None:
                continue
            statement = f"ALTER TABLE {table} {statement[guarded.end() :]}"
        execute(statement, {})


def table_exists(tx: Tx, table: str) -> bool:
    """Is there a table ``table`` (in the search path, on PostgreSQL)? A component's
    tables exist only once it is attached: code that walks every component's tables
    (key rotation) asks first."""
    if tx.backend == "sqlite":
        statement = "SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = :name"
    else:
        statement = "SELECT 1 AS found WHERE to_regclass(%(name)s) IS NOT NULL"
    return tx.sql(statement, {"name": table}).fetchone() is not None


def recorded_version(tx: Tx, component: str) -> int | None:
    """The component's version in ``pigeon_schema`` (None: no row, or no table yet)."""
    if not table_exists(tx, "pigeon_schema"):
        return None
    row = tx.sql(_READ.format(**_STYLE[tx.backend]), {"component": component}).fetchone()
    return None if row is None else int(row["version"])


def record_version(tx: Tx, component: str, version: int) -> None:
    tx.sql(VERSION_TABLE)
    tx.sql(_RECORD.format(**_STYLE[tx.backend]), {"component": component, "version": version})


def apply_component(tx: Tx, component: Component) -> int:
    """Bring ``component``'s tables up to date inside the open write transaction ``tx``;
    returns its version. Refuses (SchemaTooNew) a database that records a newer one."""
    if tx.backend == "postgres":
        tx.sql("SELECT pg_advisory_xact_lock(%(key)s)", {"key": MIGRATE_LOCK})
    # On SQLite the write transaction itself (BEGIN IMMEDIATE) makes this the one migrator,
    # and the version is read under it: another process may have migrated meanwhile.
    steps = component.migrations(tx.backend)
    latest = len(steps)
    version = recorded_version(tx, component.name)
    current = version or 0
    if current > latest:
        raise SchemaTooNew(
            f"database has {component.name} schema version {current}, newer than this "
            f"pigeon knows ({latest}); upgrade pigeon, nothing was changed"
        )
    for _number, script in steps[current:]:
        if current == 0 and UPGRADE_ONLY.search(script):
            continue  # a new database has none of what it moves, and the app's may be named so
        if tx.backend == "sqlite":
            run_sqlite_script(tx.sql, script)
        else:
            # The parameter parser is on (an empty mapping is passed): a literal % doubles.
            tx.sql(script.replace("%", "%%"), {})
    if version != latest:
        record_version(tx, component.name, latest)
    return latest


def migrate_component(db: Database, component: Component) -> int:
    """Create or upgrade ``component``'s tables in ``db`` (any backend); returns its
    version. Cheap when it is up to date: one short write transaction."""
    with db.transaction() as tx:
        return apply_component(tx, component)

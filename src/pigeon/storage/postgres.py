"""PostgreSQL backend: many intake processes and worker nodes on one database.

A psycopg 3 connection pool; every transaction borrows one connection for its duration.
Broken connections (a restarted server) are checked out of the pool and replaced, so a
process survives the database going away and coming back. Migrations are numbered like
SQLite's and applied under an advisory lock, so two processes starting at once do not race.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from pigeon.exceptions import SchemaTooNew, StoreUnavailable
from pigeon.storage.queries import migrations

Row = dict[str, Any]

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS pigeon_schema (
    component text PRIMARY KEY,
    version integer NOT NULL
)
"""


class PostgresTx:
    """An open transaction on one pooled connection, with named queries and savepoints."""

    backend = "postgres"

    def __init__(self, conn: psycopg.Connection[Row], queries: Mapping[str, str]) -> None:
        self.conn = conn
        self.queries = queries

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> psycopg.Cursor[Row]:
        return self.conn.execute(self.queries[name], params or {})

    def fetchone(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        return self.execute(name, params).fetchone()

    def fetchall(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return self.execute(name, params).fetchall()

    def executemany(self, name: str, params: list[Mapping[str, Any]]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(self.queries[name], params)

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        with self.conn.transaction():  # nested: psycopg issues SAVEPOINT / ROLLBACK TO
            yield


class PostgresDatabase:
    backend = "postgres"

    def __init__(
        self,
        url: str,
        *,
        queries: Mapping[str, str],
        components: tuple[str, ...] = ("server",),
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 30.0,
    ) -> None:
        self.url = url
        self.queries = queries
        self.pool: ConnectionPool[psycopg.Connection[Row]] = ConnectionPool(
            url,
            connection_class=psycopg.Connection[Row],
            kwargs={"row_factory": dict_row},
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            check=ConnectionPool.check_connection,
            open=False,
        )
        try:
            self.pool.open(wait=True, timeout=timeout)
        except Exception as exc:
            self.pool.close()
            raise StoreUnavailable(f"cannot connect to PostgreSQL: {exc}") from exc
        for component in components:
            self._migrate(component)

    def _migrate(self, component: str) -> None:
        steps = migrations("postgres", component)
        with self.pool.connection() as conn, conn.transaction():
            # One migrator at a time across processes; the lock ends with the transaction.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(b"pigeon-migrate"),))
            conn.execute(_VERSION_TABLE)
            row = conn.execute(
                "SELECT version FROM pigeon_schema WHERE component = %s", (component,)
            ).fetchone()
            version = int(row["version"]) if row else 0
            if version > len(steps):
                raise SchemaTooNew(
                    f"database has {component} schema version {version}, newer than this "
                    f"pigeon knows ({len(steps)}); upgrade pigeon, nothing was changed"
                )
            for _number, script in steps[version:]:
                conn.execute(script.encode())
            if len(steps) > version or row is None:
                conn.execute(
                    "INSERT INTO pigeon_schema (component, version) VALUES (%s, %s) "
                    "ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
                    (component, len(steps)),
                )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[PostgresTx]:
        try:
            with self.pool.connection() as conn, conn.transaction():
                yield PostgresTx(conn, self.queries)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"PostgreSQL unavailable: {exc}") from exc

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Row]]:
        """A pooled connection outside any transaction (LISTEN, advisory locks)."""
        with self.pool.connection() as conn:
            yield conn

    def close(self) -> None:
        self.pool.close()

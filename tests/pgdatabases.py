"""Throwaway PostgreSQL databases for tests, emptied and used again rather than dropped.

``DROP DATABASE`` makes the server take a checkpoint (it writes out every dirty page of
every database, the other tests' included) and took from a quarter of a second to over a
second per test here. A database a test has finished with is emptied instead (its
clients cut off, every schema of its own dropped, ``public`` made anew: what a new
database holds) and handed to the next test of this process; the pool is dropped when
the session ends. Made and dropped by ``pigeon.storage.scratch``, as rehearsals do.
"""

from __future__ import annotations

import contextlib
import threading
import uuid

import psycopg
from psycopg import sql

from pigeon.exceptions import StoreUnavailable
from pigeon.storage import scratch

_OWN_SCHEMAS = """
SELECT nspname FROM pg_namespace
WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'
"""


class Databases:
    """Databases on the server of ``admin_dsn``, named ``prefix`` + a random suffix."""

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
        self._server = (
            f"postgresql://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}:"
            f"{info.get('port', 5432)}/"
        )
        self._free: dict[str, list[str]] = {}  # prefix -> URLs of emptied databases
        self._lock = threading.Lock()

    def create(self, prefix: str) -> str:
        """The URL of an empty database (a URL: ``open_server_db`` knows it by its scheme)."""
        with self._lock:
            free = self._free.setdefault(prefix, [])
            if free:
                return free.pop()
        url = f"{self._server}{prefix}{uuid.uuid4().hex[:12]}"
        scratch.create(url)
        # A commit returns before its WAL reaches the disk: the tests kill pigeon's
        # processes, never the database server, so no test can tell the difference.
        with psycopg.connect(self.admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(
                    sql.Identifier(_name(url))
                )
            )
        return url

    def release(self, url: str) -> None:
        """Empty the database of ``url`` for the next test; dropped if it cannot be."""
        try:
            self._empty(_name(url))
        except psycopg.Error:
            _drop(url)
            return
        with self._lock:
            self._free.setdefault(_name(url)[:-12], []).append(url)

    def drop_all(self) -> None:
        """Drop every pooled database (at the end of the session)."""
        with self._lock:
            urls = [url for free in self._free.values() for url in free]
            self._free.clear()
        for url in urls:
            _drop(url)

    def _empty(self, name: str) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        dsn = psycopg.conninfo.make_conninfo(self.admin_dsn, dbname=name)
        with psycopg.connect(dsn) as conn:  # one transaction: emptied whole or not at all
            for (schema,) in conn.execute(_OWN_SCHEMAS).fetchall():
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
            conn.execute("CREATE SCHEMA public AUTHORIZATION pg_database_owner")
            conn.execute("GRANT USAGE ON SCHEMA public TO PUBLIC")


def _name(url: str) -> str:
    return url.rsplit("/", 1)[1]


def _drop(url: str) -> None:
    with contextlib.suppress(StoreUnavailable):  # the server is gone: nothing left to tidy
        scratch.discard(url)

"""A database for a run that must not touch anyone's data (``pigeon rehearse``).

``holdings(url)`` says what a database already holds (each table with rows, and its count);
``create(url)`` makes the database ``url`` names and ``discard(url)`` removes it again:
for a SQLite path the file (with its ``-wal`` and ``-shm``), for a ``postgresql://`` URL the
database on that server (``CREATE DATABASE`` / ``DROP DATABASE ... WITH (FORCE)``, run from
the server's maintenance database ``postgres``). The caller discards only what it created.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from pigeon.exceptions import ConfigurationError, StoreUnavailable
from pigeon.extras import require_extra

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
MAINTENANCE_DB = "postgres"
_SQLITE_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
_PG_TABLES = (
    "SELECT table_schema AS s, table_name AS t FROM information_schema.tables "
    "WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')"
)
# What a database created here may be called: CREATE DATABASE takes no parameter, so the
# name goes into the statement and must be one that needs no quoting rule but ours.
_DB_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def _postgres(url: str) -> bool:
    return url.startswith(POSTGRES_SCHEMES)


def exists(url: str) -> bool:
    """Does the database ``url`` names exist (for SQLite: is there a file)?"""
    if not _postgres(url):
        return Path(url).exists()
    with _maintenance(url) as admin:
        row = admin.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (_db_name(url),)
        ).fetchone()
    return row is not None


def holdings(url: str) -> dict[str, int]:
    """Each table of the database ``url`` names that holds rows, with its row count
    (``{}``: empty, or no such database). A file that is no SQLite database is held to
    hold something: ``{"<not a SQLite database>": 1}``, never overwritten."""
    if not exists(url):
        return {}
    if _postgres(url):
        return _pg_holdings(url)
    if Path(url).stat().st_size == 0:
        return {}
    try:
        conn = sqlite3.connect(f"{Path(url).resolve().as_uri()}?mode=ro", uri=True)
        try:
            names = [r[0] for r in conn.execute(_SQLITE_TABLES).fetchall()]
            counts = {
                n: conn.execute(f'SELECT count(*) FROM "{_quoted(n)}"').fetchone()[0] for n in names
            }
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return {"<not a SQLite database>": 1}
    return {name: int(n) for name, n in counts.items() if n}


def _quoted(identifier: str) -> str:
    return identifier.replace('"', '""')


def _pg_holdings(url: str) -> dict[str, int]:
    psycopg = _psycopg()
    found: dict[str, int] = {}
    try:
        with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
            for row in conn.execute(_PG_TABLES).fetchall():
                name = psycopg.sql.Identifier(row[0], row[1])
                query = psycopg.sql.SQL("SELECT count(*) FROM {}").format(name)
                n = int(conn.execute(query).fetchone()[0])
                if n:
                    found[f"{row[0]}.{row[1]}" if row[0] != "public" else row[1]] = n
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot read the database: {_first_line(exc)}") from exc
    return found


def create(url: str) -> None:
    """Make the (absent) database ``url`` names: an empty SQLite file (its folder must
    exist), or a PostgreSQL database on that server."""
    if not _postgres(url):
        path = Path(url)
        if not path.parent.is_dir():
            raise ConfigurationError(f"{path.parent} is no folder: cannot make {path} in it")
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        return
    with _maintenance(url) as admin:
        admin.execute(f'CREATE DATABASE "{_db_name(url)}"')


def discard(url: str) -> None:
    """Remove the database ``url`` names, whoever is still connected to it."""
    if not _postgres(url):
        for suffix in ("", "-wal", "-shm", "-journal", "-writer"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(url + suffix)
        return
    with _maintenance(url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{_db_name(url)}" WITH (FORCE)')


def _psycopg() -> Any:
    require_extra("postgres", "a PostgreSQL database")
    import psycopg
    import psycopg.sql

    return psycopg


def _db_name(url: str) -> str:
    psycopg = _psycopg()
    try:
        name = psycopg.conninfo.conninfo_to_dict(url).get("dbname")
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"not a PostgreSQL URL: {_first_line(exc)}") from exc
    if not isinstance(name, str) or not _DB_NAME.fullmatch(name):
        raise ConfigurationError(
            f"the database name {name!r} must be letters, digits and underscores (at most 63, "
            "not starting with a digit) for a database made and dropped here"
        )
    return name


@contextlib.contextmanager
def _maintenance(url: str) -> Any:
    """An autocommit connection to the server's maintenance database."""
    psycopg = _psycopg()
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = MAINTENANCE_DB
    try:
        conn = psycopg.connect(
            psycopg.conninfo.make_conninfo(**info), connect_timeout=5, autocommit=True
        )
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot connect to PostgreSQL: {_first_line(exc)}") from exc
    try:
        yield conn
    except psycopg.Error as exc:
        raise StoreUnavailable(f"PostgreSQL refused: {_first_line(exc)}") from exc
    finally:
        conn.close()


def _first_line(exc: BaseException) -> str:
    return next(
        (line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__
    )

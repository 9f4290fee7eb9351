"""A server database made by the previous release opens in this one with every row.

The database is built with the migrations of that release (``server`` up to
``PREVIOUS``, the one before the rename), rows are written to the tables this release
renames, and then ``open_server_db`` migrates it: each row is found under the new names,
on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

import psycopg
import pytest

from pigeon.server.idempotency_stores import idempotency_store
from pigeon.storage.queries import migrations
from pigeon.storage.server import SERVER_APPLICATION_ID, open_server_db
from pigeon.storage.sqlite import _split_statements


def _before(marker: str) -> int:
    """The last server migration before the one that says ``marker`` (the same on both
    backends): the schema of the release before it, whatever its number becomes."""
    found = {
        backend: [n for n, script in migrations(backend, "server") if marker in script]
        for backend in ("sqlite", "postgres")
    }
    assert found["sqlite"] == found["postgres"] and len(found["sqlite"]) == 1, found
    return found["sqlite"][0] - 1


PREVIOUS = _before("RENAME TO pigeon_idempotency_claims")

CLAIM = (
    "INSERT INTO idempotency_claims (principal, idem_key, fingerprint, method, path,"
    " operation_id, state, lock_token, locked_until, status, response_headers,"
    " response_body, body_format, created_at, completed_at, response_expires_at,"
    " claim_expires_at) VALUES ('alice', 'k{n}', 'fp', 'POST', '/notes', 'op{n}',"
    " 'completed', NULL, NULL, 201, '[]', '{{\"id\": \"{n}\"}}', 'json', 1.0, 2.0,"
    " 4e12, 4e12)"
)
ROWS = 3


def _previous_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        for number, script in migrations("sqlite", "server")[:PREVIOUS]:
            for statement in _split_statements(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        conn.execute(f"PRAGMA application_id = {SERVER_APPLICATION_ID}")
        for n in range(ROWS):
            conn.execute(CLAIM.format(n=n))
        conn.execute("COMMIT")
    finally:
        conn.close()


def _previous_postgres(url: str) -> None:
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(b"pigeon-migrate"),))
        conn.execute(
            "CREATE TABLE pigeon_schema (component text PRIMARY KEY, version integer NOT NULL)"
        )
        for _number, script in migrations("postgres", "server")[:PREVIOUS]:
            conn.execute(script.encode())
        conn.execute("INSERT INTO pigeon_schema VALUES ('server', %s)", (PREVIOUS,))
        for n in range(ROWS):
            conn.execute(CLAIM.format(n=n).encode())


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_previous_release_database_keeps_every_row(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "postgres":
        url: str = request.getfixturevalue("pg_url")
        _previous_postgres(url)
    else:
        url = str(tmp_path / "server.db")
        _previous_sqlite(tmp_path / "server.db")
    db = open_server_db(url)  # migrates past PREVIOUS
    try:
        store = idempotency_store(db)
        with db.transaction() as tx:
            for n in range(ROWS):
                row = store.get(tx, "alice", f"k{n}")
                assert row is not None and row["operation_id"] == f"op{n}"
                assert row["response_body"] == f'{{"id": "{n}"}}'
            names = {
                r["name"]
                for r in tx.sql(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                    if backend == "sqlite"
                    else "SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public'"
                ).fetchall()
            }
        assert "idempotency_claims" not in names and "pigeon_idempotency_claims" in names
    finally:
        db.close()

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

from pigeon.reference.notes import read_ledger
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
# The reference app's tables, unprefixed before (server migration 9 adds ref_).
REFERENCE = (
    "INSERT INTO notes (principal, id, version, data, deleted, clock, created_at, updated_at)"
    " VALUES ('alice', 'n{n}', 1, '{{}}', 0, 'c', 1.0, 1.0)",
    "INSERT INTO effect_ledger (idempotency_key, principal, operation_id, entity, method,"
    " status, version, clock, applied_at) VALUES ('k{n}', 'alice', 'op{n}', 'note:n{n}',"
    " 'POST', 201, 1, 'c', 1.0)",
    "INSERT INTO resources (principal, collection, id, version, data, deleted, clock,"
    " raw_clock, created_at, updated_at) VALUES ('alice', 'docs', 'd{n}', 1, '{{}}', 0, 'c',"
    " 'c', 1.0, 1.0)",
    "INSERT INTO write_outcomes (principal, collection, id, idempotency_key, operation_id,"
    " outcome, clock, raw_clock, other_clock, version, payload, recorded_at) VALUES"
    " ('alice', 'docs', 'd{n}', 'k{n}', 'op{n}', 'won', 'c', 'c', NULL, 1, '{{}}', 1.0)",
)
RENAMED = {
    "idempotency_claims": "pigeon_idempotency_claims",
    "notes": "ref_notes",
    "effect_ledger": "ref_effect_ledger",
    "resources": "ref_resources",
    "write_outcomes": "ref_write_outcomes",
}


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
            for statement in (CLAIM, *REFERENCE):
                conn.execute(statement.format(n=n))
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
            for statement in (CLAIM, *REFERENCE):
                conn.execute(statement.format(n=n).encode())


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
            counts = {
                new: tx.sql(f"SELECT count(*) AS n FROM {new}").fetchone()["n"]
                for new in RENAMED.values()
            }
        assert not names & RENAMED.keys() and names >= set(RENAMED.values())
        assert counts == dict.fromkeys(RENAMED.values(), ROWS)
        ledger = read_ledger(db)  # the reference app reads its rows under the new names
        assert [e["idempotency_key"] for e in ledger] == [f"k{n}" for n in range(ROWS)]
    finally:
        db.close()

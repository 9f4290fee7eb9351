"""A server database made by a previous release opens in this one with every row.

The previous releases' schemas are built from their own migration files, frozen in
``tests/storage/previous/<backend>/`` as those releases shipped them (the server component
made the reference app's tables then: notes and effect_ledger in 0001, resources and
write_outcomes in 0003, renamed to ref_ in 0009). Two layouts are rebuilt: 7, before the
library's and the reference app's prefixes, and 9, the last before the reference app had
a schema component of its own. Rows are written under that layout's names, then this
release opens it (``open_server_db``: the server component) and attaches the reference
component (``create_notes_app``): every row is found under the new names, each component's
version is recorded on its own, on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

import psycopg
import pytest

from pigeon.reference.conflicts import read_outcomes, read_resource
from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.reference.schema import REFERENCE
from pigeon.server.idempotency_stores import idempotency_store
from pigeon.storage.base import Database
from pigeon.storage.queries import migrations
from pigeon.storage.schema import split_statements
from pigeon.storage.server import SERVER_APPLICATION_ID, open_server_db

FROZEN = Path(__file__).parent / "previous"
ROWS = 3


def frozen(backend: str, upto: int) -> list[str]:
    """The previous release's server migrations 1..``upto`` for ``backend``."""
    files = sorted((FROZEN / backend).glob("server_*.sql"))
    assert [int(f.stem.split("_")[1]) for f in files] == list(range(1, len(files) + 1))
    return [f.read_text(encoding="utf-8") for f in files[:upto]]


def _insert(upto: int) -> list[str]:
    """Rows for each table the previous layout had, under its names then."""
    claims = "idempotency_claims" if upto < 8 else "pigeon_idempotency_claims"
    prefix = "" if upto < 9 else "ref_"
    return [
        f"INSERT INTO {claims} (principal, idem_key, fingerprint, method, path, operation_id,"
        " state, lock_token, locked_until, status, response_headers, response_body,"
        " body_format, created_at, completed_at, response_expires_at, claim_expires_at)"
        " VALUES ('alice', 'k{n}', 'fp', 'POST', '/notes', 'op{n}', 'completed', NULL, NULL,"
        " 201, '[]', '{{\"id\": \"{n}\"}}', 'json', 1.0, 2.0, 4e12, 4e12)",
        f"INSERT INTO {prefix}notes (principal, id, version, data, deleted, clock, created_at,"
        " updated_at) VALUES ('alice', 'n{n}', 1, '{{}}', 0, 'c', 1.0, 1.0)",
        f"INSERT INTO {prefix}effect_ledger (idempotency_key, principal, operation_id, entity,"
        " method, status, version, clock, applied_at) VALUES ('k{n}', 'alice', 'op{n}',"
        " 'note:n{n}', 'POST', 201, 1, 'c', 1.0)",
        f"INSERT INTO {prefix}resources (principal, collection, id, version, data, deleted,"
        " clock, raw_clock, created_at, updated_at) VALUES ('alice', 'docs', 'd{n}', 1,"
        " '{{\"v\": {n}}}', 0, 'c', 'c', 1.0, 1.0)",
        f"INSERT INTO {prefix}write_outcomes (principal, collection, id, idempotency_key,"
        " operation_id, outcome, clock, raw_clock, other_clock, version, payload, recorded_at)"
        " VALUES ('alice', 'docs', 'd{n}', 'k{n}', 'op{n}', 'won', 'c', 'c', NULL, 1, '{{}}',"
        " 1.0)",
    ]


def _previous_sqlite(path: Path, upto: int) -> None:
    """As the previous release's migrator left a file: its version in the header alone."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        for number, script in enumerate(frozen("sqlite", upto), start=1):
            for statement in split_statements(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        conn.execute(f"PRAGMA application_id = {SERVER_APPLICATION_ID}")
        for n in range(ROWS):
            for statement in _insert(upto):
                conn.execute(statement.format(n=n))
        conn.execute("COMMIT")
    finally:
        conn.close()


def _previous_postgres(url: str, upto: int) -> None:
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(b"pigeon-migrate"),))
        conn.execute(
            "CREATE TABLE pigeon_schema (component text PRIMARY KEY, version integer NOT NULL)"
        )
        for script in frozen("postgres", upto):
            conn.execute(script.encode())
        conn.execute("INSERT INTO pigeon_schema VALUES ('server', %s)", (upto,))
        for n in range(ROWS):
            for statement in _insert(upto):
                conn.execute(statement.format(n=n).encode())


OLD_NAMES = {"idempotency_claims", "notes", "effect_ledger", "resources", "write_outcomes"}
NEW_NAMES = {
    "pigeon_idempotency_claims",
    "ref_notes",
    "ref_effect_ledger",
    "ref_resources",
    "ref_write_outcomes",
}


def _tables(db: Database, backend: str) -> set[str]:
    with db.transaction() as tx:
        return {
            r["name"]
            for r in tx.sql(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                if backend == "sqlite"
                else "SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        }


@pytest.mark.parametrize("upto", [7, 9])
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_previous_release_database_keeps_every_row(
    backend: str, upto: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "postgres":
        url: str = request.getfixturevalue("pg_url")
        _previous_postgres(url, upto)
    else:
        url = str(tmp_path / "server.db")
        _previous_sqlite(tmp_path / "server.db", upto)
    server_latest = len(migrations(backend, "server"))
    db = open_server_db(url)  # the server component migrates past ``upto``
    try:
        store = idempotency_store(db)
        with db.transaction() as tx:
            for n in range(ROWS):
                row = store.get(tx, "alice", f"k{n}")
                assert row is not None and row["operation_id"] == f"op{n}"
                assert row["response_body"] == f'{{"id": "{n}"}}'
            versions = {r["component"]: r["version"] for r in tx.sql("SELECT * FROM pigeon_schema")}
        assert versions == {"server": server_latest}

        create_notes_app(db, purge_interval=None)  # attaches the reference component
        names = _tables(db, backend)
        assert not names & OLD_NAMES and names >= NEW_NAMES
        with db.transaction() as tx:
            counts = {
                t: tx.sql(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in NEW_NAMES
            }
            versions = {r["component"]: r["version"] for r in tx.sql("SELECT * FROM pigeon_schema")}
            if backend == "sqlite":  # the header keeps the server's version, for older pigeons
                user_version = tx.sql("PRAGMA user_version").fetchone()["user_version"]
                assert user_version == server_latest
        assert counts == dict.fromkeys(NEW_NAMES, ROWS)
        assert versions == {
            "server": server_latest,
            "reference": len(REFERENCE.migrations(backend)),
        }
        # The reference app reads its rows through its own queries, under the new names.
        ledger = read_ledger(db)
        assert [e["idempotency_key"] for e in ledger] == [f"k{n}" for n in range(ROWS)]
        for n in range(ROWS):
            resource = read_resource(db, "alice", "docs", f"d{n}")
            assert resource is not None and resource["data"] == f'{{"v": {n}}}'
        assert [o["operation_id"] for o in read_outcomes(db, "alice")] == [
            f"op{n}" for n in range(ROWS)
        ]
    finally:
        db.close()

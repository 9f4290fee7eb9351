"""Every claim and lookup of the intake and the notes app is an index scan on PostgreSQL,
and reads about the rows it asks for, not the rows its principal has.

The tables are filled with realistic numbers of rows (10k claims over many principals,
about 1% of them due for purging; 10k notes; 10k ledger entries) and ANALYZEd, then each
named query is EXPLAINed with the parameters the code passes: a sequential scan of a big
table in any plan fails the test. Then the same rows under one principal in tables never
analyzed (a new deployment, or autovacuum off), each query run under EXPLAIN ANALYZE: a
plan that reads a principal's every row to find a few (a bitmap scan on the key's first
column, a hash join against it) fails there, however good it looked with statistics. And
the same again with each query's plan made while the tables were still empty and kept as
they filled, as a new deployment's prepared statements keep theirs (psycopg prepares a
statement run often, and PostgreSQL then reuses a generic plan).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from pigeon.reference.schema import REFERENCE, attach
from pigeon.storage.postgres import PostgresDatabase
from pigeon.storage.queries import load_queries
from pigeon.storage.server import open_server_db, server_queries
from tests.conftest import DATABASES, require_postgres

pytestmark = pytest.mark.postgres

ROWS = 10_000
NOW = 1_700_000_000.0
BIG_TABLES = {"pigeon_idempotency_claims", "ref_notes", "ref_effect_ledger"}

KEY = {"principal": "user-7", "idem_key": "key-77"}
CLAIM = KEY | {
    "fingerprint": "f",
    "method": "POST",
    "path": "/notes",
    "operation_id": "op",
    "lock_token": "t",
    "locked_until": NOW + 60,
    "claim_expires_at": NOW + 86400,
    "now": NOW,
    "claim_wait": "500ms",
}
NOTE = {"principal": "user-7", "id": "note-77", "data": "{}", "deleted": 0, "clock": "c"}

COMPLETE = KEY | {
    "lock_token": "t",
    "status": 201,
    "response_headers": "[]",
    "response_body": "{}",
    "body_format": "json",
    "response_expires_at": NOW + 86400,
    "now": NOW,
}

# query name -> parameters, as the intake and the notes app pass them
LOOKUPS: dict[str, dict[str, Any]] = {
    "claim_get": KEY,
    "claim_take_over": CLAIM,
    "claim_fence": KEY | {"lock_token": "t"},
    "claim_renew": KEY | {"lock_token": "t", "locked_until": NOW + 60},
    "claim_complete": COMPLETE,
    "claim_complete_last": COMPLETE,
    "claim_release": KEY | {"lock_token": "t"},
    "purge_responses": {"now": NOW, "limit": 5000},
    "purge_claims": {"now": NOW, "limit": 5000},
    "note_get": NOTE,
    "note_lock": NOTE,
    "note_list": NOTE,
    "note_write": NOTE | {"now": NOW},
    "note_write_logged": NOTE
    | {
        "now": NOW,
        "if_match": "1",
        "idempotency_key": "key-77",
        "operation_id": "op-77",
        "entity": "note:note-77",
        "method": "PUT",
        "status": 200,
    },
    "ledger_all": {"after": ROWS - 100, "limit": 1000},
    # The set-based batch's lookups: one JSON array of keys or ids per statement.
    "claims_get_many": {"principal": "user-7", "keys": '["key-77", "key-78"]'},
    "notes_lock_many": {"principal": "user-7", "ids": '["note-77", "note-78"]', "with_data": True},
    "notes_write_many": {"principal": "user-7", "now": NOW, "notes": '[["note-77", "{}", 0, "c"]]'},
    # A create looks each id up first (a note that has a row is left to the one-note way).
    "notes_create_many": {
        "principal": "user-7",
        "now": NOW,
        "notes": '[["note-77", "{}", "c"], ["note-new", "{}", "c"]]',
    },
}

FILL = """
INSERT INTO pigeon_idempotency_claims (
    principal, idem_key, fingerprint, method, path, operation_id, state, lock_token,
    locked_until, status, response_headers, response_body, body_format, created_at,
    completed_at, response_expires_at, claim_expires_at)
SELECT 'user-' || (7 + mod(i, %(principals)s)), 'key-' || i, 'f', 'POST', '/notes',
       'op-' || i, 'completed', NULL, NULL, 201, '[]', '{"id": 1}', 'json', %(now)s - 3600,
       %(now)s - 3600,
       -- one in a hundred due: expired responses and claims, the rest live
       CASE WHEN mod(i, 100) = 0 THEN %(now)s - 1 ELSE %(now)s + i END,
       CASE WHEN mod(i, 100) = 0 THEN %(now)s - 1 ELSE %(now)s + 86400 + i END
FROM generate_series(1, %(rows)s) AS i;

INSERT INTO ref_notes (principal, id, version, data, deleted, clock, created_at, updated_at)
SELECT 'user-' || (7 + mod(i, %(principals)s)), 'note-' || i, 1, '{}', 0, 'c', %(now)s, %(now)s
FROM generate_series(1, %(rows)s) AS i;

INSERT INTO ref_effect_ledger (idempotency_key, principal, operation_id, entity, method,
                           status, version, clock, applied_at)
SELECT 'key-' || i, 'user-' || (7 + mod(i, %(principals)s)), 'op-' || i, 'note:' || i,
       'POST', 201, 1, 'c', %(now)s
FROM generate_series(1, %(rows)s) AS i;
"""


def _scans(plan: dict[str, Any]) -> list[tuple[str, str]]:
    found = [(plan["Node Type"], plan.get("Relation Name", ""))]
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


def _fill(url: str, principals: int) -> PostgresDatabase:
    # The intake's queries and the reference notes app's (its own component, attached).
    queries = {**server_queries("postgres"), **REFERENCE.queries("postgres")}
    db = PostgresDatabase(url, queries=queries)
    attach(db)
    with db.connection() as conn, conn.transaction():
        for statement in FILL.split(";\n\n"):
            conn.execute(statement, {"now": NOW, "rows": ROWS, "principals": principals})
    return db


@pytest.fixture(scope="module")
def filled(pg_url_module: str) -> PostgresDatabase:
    db = _fill(pg_url_module, principals=100)
    with db.connection() as conn:
        conn.autocommit = True
        conn.execute("ANALYZE")
        conn.autocommit = False
    return db


def _plan(db: PostgresDatabase, name: str, *, analyze: bool = False) -> dict[str, Any]:
    """The plan of query ``name`` with the parameters the code passes; ``analyze``: run
    too, for the rows each node read (and rolled back)."""
    options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
    with db.connection() as conn:
        try:
            row = conn.execute(f"EXPLAIN ({options}) {db.queries[name]}".encode(), LOOKUPS[name])
            found = row.fetchone()
        finally:
            conn.rollback()  # under ANALYZE the statement ran: nothing it wrote stays
    assert found is not None
    plan = found["QUERY PLAN"]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    root: dict[str, Any] = plan[0]["Plan"]
    return root


@pytest.mark.parametrize("name", sorted(LOOKUPS))
def test_claims_and_lookups_never_scan_a_big_table(filled: PostgresDatabase, name: str) -> None:
    scans = _scans(_plan(filled, name))
    seq = [table for node, table in scans if node == "Seq Scan" and table in BIG_TABLES]
    assert not seq, f"{name} scans {seq} sequentially: {scans}"
    assert any("Index" in node for node, _ in scans), f"{name} uses no index: {scans}"


@pytest.fixture(scope="module")
def one_principal() -> Iterator[PostgresDatabase]:
    """The same rows, every one of them user-7's, in tables never analyzed."""
    require_postgres()
    url = DATABASES.create("pigeon_m_")
    try:
        db = _fill(url, principals=1)
        yield db
        db.close()
    finally:
        DATABASES.release(url)


# The most rows of the big tables a request's statement may read in one_principal: the
# few it asks for. Not held to it: note_list reads the principal's notes by design; the
# purges' rounds and the ledger's audit run in the background, one statement a round, and
# plan on their indexes once analyzed (the test above; never analyzed, PostgreSQL may
# prefer a scan and a sort); claim_complete_last is claim_complete's UPDATE in a statement
# that fails by design when it completes nothing.
READ_BOUND = 20
NOT_BOUND = {"note_list", "purge_responses", "purge_claims", "ledger_all", "claim_complete_last"}
INSERTING = {"notes_create_many"}  # the one lookup that writes rows


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows the scans of big tables read: returned, and filtered out after reading."""
    read = 0
    if plan.get("Relation Name") in BIG_TABLES and "Scan" in plan["Node Type"]:
        kept = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
        read = (kept + plan.get("Rows Removed by Index Recheck", 0)) * plan["Actual Loops"]
    return read + sum(_rows_read(child) for child in plan.get("Plans", []))


@pytest.mark.parametrize("name", sorted(set(LOOKUPS) - NOT_BOUND))
def test_a_lookup_reads_the_rows_it_asks_for_not_its_principals(
    one_principal: PostgresDatabase, name: str
) -> None:
    plan = _plan(one_principal, name, analyze=True)
    read = _rows_read(plan)
    assert read <= READ_BOUND, f"{name} read {read} rows of {ROWS}: {plan}"


def _positional(statement: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """A named query with ``$n`` placeholders, for PREPARE, and its values in their order."""
    names: list[str] = []

    def number(found: re.Match[str]) -> str:
        if found.group(1) not in names:
            names.append(found.group(1))
        return f"${names.index(found.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, statement).replace("%%", "%")
    return text, [params[name] for name in names]


def _execute(name: str, values: list[Any]) -> sql.Composed:
    literals = sql.SQL(", ").join(sql.Literal(value) for value in values)
    return sql.SQL("EXECUTE {}({})").format(sql.Identifier(name), literals)


@pytest.fixture(scope="module")
def planned_empty() -> Iterator[tuple[psycopg.Connection[dict[str, Any]], dict[str, list[Any]]]]:
    """A session whose lookups were prepared, and their generic plans made, while every
    table was empty; the tables filled afterwards (one_principal's rows), never analyzed."""
    require_postgres()
    url = DATABASES.create("pigeon_e_")
    queries = {**server_queries("postgres"), **REFERENCE.queries("postgres")}
    db = PostgresDatabase(url, queries=queries)
    attach(db)
    conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
    try:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        prepared = {}
        # Those that insert last: a row rolled back still leaves its table a page, and
        # every plan here is made on tables of none. (Made on a table of one page, the
        # plans of notes_lock_many and notes_write_many read a principal's every note,
        # until PostgreSQL analyzes the table and plans them again: not held here.)
        for name in sorted(set(LOOKUPS) - NOT_BOUND, key=lambda name: (name in INSERTING, name)):
            text, values = _positional(queries[name], LOOKUPS[name])
            conn.execute(f"PREPARE {name} AS {text}".encode())
            with conn.transaction(force_rollback=True):
                conn.execute(_execute(name, values))  # the generic plan, made now
            prepared[name] = values
        db.close()
        _fill(url, principals=1).close()
        yield conn, prepared
    finally:
        conn.close()
        DATABASES.release(url)


@pytest.mark.parametrize("name", sorted(set(LOOKUPS) - NOT_BOUND))
def test_a_plan_made_on_empty_tables_reads_the_rows_it_asks_for_once_they_fill(
    planned_empty: tuple[psycopg.Connection[dict[str, Any]], dict[str, list[Any]]], name: str
) -> None:
    conn, prepared = planned_empty
    explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + _execute(name, prepared[name])
    with conn.transaction(force_rollback=True):
        found = conn.execute(explain).fetchone()
    assert found is not None
    plan = found["QUERY PLAN"]
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    read = _rows_read(root)
    assert read <= READ_BOUND, f"{name} read {read} rows of {ROWS}: {root}"


def test_the_explained_queries_are_every_lookup_the_backend_defines() -> None:
    # Inserts, the stats count, the health probe and the replay hook's SET TRANSACTION
    # have no lookup to index.
    unindexed = {"claim_insert", "note_create", "ledger_append", "claim_stats", "health_probe"}
    unindexed |= {"note_create_logged"}
    unindexed |= {
        "replay_read_only",
        "claims_store_many",
        "ledger_append_many",
    }
    notes = {
        n for n in REFERENCE.queries("postgres") if n.startswith(("note_", "notes_", "ledger_"))
    }
    defined = load_queries("postgres", "intake").keys() | notes
    assert defined - unindexed == set(LOOKUPS)


def _indexes_read(plan: dict[str, Any]) -> set[str]:
    found = {plan["Index Name"]} if "Index Name" in plan else set()
    return found.union(*(_indexes_read(child) for child in plan.get("Plans", [])))


def _secondary_on_sqlite(path: Path) -> set[str]:
    """The secondary indexes SQLite's schema makes on the big tables (not the keys')."""
    db = open_server_db(path)
    attach(db)
    db.close()
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            f" AND tbl_name IN ({', '.join('?' * len(BIG_TABLES))})",
            sorted(BIG_TABLES),
        ).fetchall()
    conn.close()
    return {name for (name,) in rows}


def test_every_index_of_a_big_table_is_read_by_a_statement(
    filled: PostgresDatabase, tmp_path: Path
) -> None:
    # An index no statement reads costs every row written (the ledger's by entity did:
    # a third of its row's insert). A primary key is read by the inserts' own checks.
    # SQLite's schema makes the same ones, so the plans here speak for it too.
    read = set().union(*(_indexes_read(_plan(filled, name)) for name in LOOKUPS))
    with filled.connection() as conn:
        rows = conn.execute(
            "SELECT i.indexrelid::regclass::text AS name FROM pg_index AS i"
            " WHERE i.indrelid::regclass::text = ANY (%(tables)s) AND NOT i.indisprimary",
            {"tables": sorted(BIG_TABLES)},
        ).fetchall()
        conn.rollback()
    secondary = {row["name"] for row in rows}
    assert secondary, "no secondary index found: the query reads the wrong tables"
    assert secondary <= read, f"read by no statement: {sorted(secondary - read)}"
    assert _secondary_on_sqlite(tmp_path / "server.db") == secondary

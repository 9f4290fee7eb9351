"""Every claim and lookup of the intake and the notes app is an index scan on PostgreSQL.

The tables are filled with realistic numbers of rows (10k claims over many principals,
about 1% of them due for purging; 10k notes; 10k ledger entries) and ANALYZEd, then each
named query is EXPLAINed with the parameters the code passes: a sequential scan of a big
table in any plan fails the test.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pigeon.reference.schema import REFERENCE, attach
from pigeon.storage.postgres import PostgresDatabase
from pigeon.storage.queries import load_queries
from pigeon.storage.server import server_queries

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
    "claims_complete_many": {
        "principal": "user-7",
        "answers": '[["key-77", "t", 201, "[]", "{}"]]',
        "now": NOW,
        "response_expires_at": NOW + 86400,
    },
    "notes_lock_many": {"principal": "user-7", "ids": '["note-77", "note-78"]', "with_data": True},
    "notes_write_many": {"principal": "user-7", "now": NOW, "notes": '[["note-77", "{}", 0, "c"]]'},
}

FILL = """
INSERT INTO pigeon_idempotency_claims (
    principal, idem_key, fingerprint, method, path, operation_id, state, lock_token,
    locked_until, status, response_headers, response_body, body_format, created_at,
    completed_at, response_expires_at, claim_expires_at)
SELECT 'user-' || mod(i, 100), 'key-' || i, 'f', 'POST', '/notes', 'op-' || i, 'completed',
       NULL, NULL, 201, '[]', '{"id": 1}', 'json', %(now)s - 3600, %(now)s - 3600,
       -- one in a hundred due: expired responses and claims, the rest live
       CASE WHEN mod(i, 100) = 0 THEN %(now)s - 1 ELSE %(now)s + i END,
       CASE WHEN mod(i, 100) = 0 THEN %(now)s - 1 ELSE %(now)s + 86400 + i END
FROM generate_series(1, %(rows)s) AS i;

INSERT INTO ref_notes (principal, id, version, data, deleted, clock, created_at, updated_at)
SELECT 'user-' || mod(i, 100), 'note-' || i, 1, '{}', 0, 'c', %(now)s, %(now)s
FROM generate_series(1, %(rows)s) AS i;

INSERT INTO ref_effect_ledger (idempotency_key, principal, operation_id, entity, method,
                           status, version, clock, applied_at)
SELECT 'key-' || i, 'user-' || mod(i, 100), 'op-' || i, 'note:' || i, 'POST', 201, 1, 'c',
       %(now)s
FROM generate_series(1, %(rows)s) AS i;
"""


def _scans(plan: dict[str, Any]) -> list[tuple[str, str]]:
    found = [(plan["Node Type"], plan.get("Relation Name", ""))]
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


@pytest.fixture(scope="module")
def filled(pg_url_module: str) -> PostgresDatabase:
    # The intake's queries and the reference notes app's (its own component, attached).
    queries = {**server_queries("postgres"), **REFERENCE.queries("postgres")}
    db = PostgresDatabase(pg_url_module, queries=queries)
    attach(db)
    with db.connection() as conn, conn.transaction():
        for statement in FILL.split(";\n\n"):
            conn.execute(statement, {"now": NOW, "rows": ROWS})
    with db.connection() as conn:
        conn.autocommit = True
        conn.execute("ANALYZE")
        conn.autocommit = False
    return db


@pytest.mark.parametrize("name", sorted(LOOKUPS))
def test_claims_and_lookups_never_scan_a_big_table(filled: PostgresDatabase, name: str) -> None:
    sql = "EXPLAIN (FORMAT JSON) " + filled.queries[name]
    with filled.connection() as conn, conn.transaction():
        row = conn.execute(sql.encode(), LOOKUPS[name]).fetchone()
    assert row is not None
    plan = row["QUERY PLAN"]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    scans = _scans(plan[0]["Plan"])
    seq = [table for node, table in scans if node == "Seq Scan" and table in BIG_TABLES]
    assert not seq, f"{name} scans {seq} sequentially: {scans}"
    assert any("Index" in node for node, _ in scans), f"{name} uses no index: {scans}"


def test_the_explained_queries_are_every_lookup_the_backend_defines() -> None:
    # Inserts, the stats count, the health probe and the replay hook's SET TRANSACTION
    # have no lookup to index.
    unindexed = {"claim_insert", "note_create", "ledger_append", "claim_stats", "health_probe"}
    unindexed |= {"note_create_logged"}
    unindexed |= {
        "replay_read_only",
        "claims_insert_many",
        "notes_create_many",
        "ledger_append_many",
    }
    notes = {
        n for n in REFERENCE.queries("postgres") if n.startswith(("note_", "notes_", "ledger_"))
    }
    defined = load_queries("postgres", "intake").keys() | notes
    assert defined - unindexed == set(LOOKUPS)

"""Every lookup of the intake and the notes app finds its rows by their whole key on SQLite.

The twin of test_pg_indexes.py: SQLite's plan (EXPLAIN QUERY PLAN) of each named query,
in a file with no statistics (SQLite's planner has none until ANALYZE). A table scan of a
keyed table, or a search on the first column of a two-column key alone (which walks every
claim or note of a principal to find a few), fails the test.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.reference.schema import REFERENCE, attach
from pigeon.storage.queries import load_queries
from pigeon.storage.server import open_server_db

# table -> its key, as SQLite names the columns of a search on it
KEYS = {
    "pigeon_idempotency_claims": "principal=? AND idem_key=?",
    "ref_notes": "principal=? AND id=?",
    "ref_resources": "principal=? AND collection=? AND id=?",
}
# Statements that read many rows by design: the stats count, a principal's list.
WHOLE = {"claim_stats": "pigeon_idempotency_claims"}
BY_PRINCIPAL = {"note_list", "outcome_list"}

QUERIES = {**load_queries("sqlite", "intake"), **REFERENCE.queries("sqlite")}


@pytest.fixture(scope="module")
def conn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sqlite3.Connection]:
    path = Path(tmp_path_factory.mktemp("plans")) / "server.db"
    db = open_server_db(path)
    attach(db)
    db.close()
    connection = sqlite3.connect(path)
    yield connection
    connection.close()


def _plan(conn: sqlite3.Connection, name: str) -> list[str]:
    sql = QUERIES[name]
    named = re.findall(r":(\w+)", sql)
    numbered = [int(n) for n in re.findall(r"\?(\d+)", sql)]
    # Positional statements (executemany's) number their placeholders or give them in order.
    params = dict.fromkeys(named) if named else [None] * max(numbered or [sql.count("?")])
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


@pytest.mark.parametrize("name", sorted(set(QUERIES) - BY_PRINCIPAL))
def test_a_lookup_searches_a_keyed_table_by_its_whole_key(
    conn: sqlite3.Connection, name: str
) -> None:
    for step in _plan(conn, name):
        for table, key in KEYS.items():
            if WHOLE.get(name) == table:
                continue
            assert not re.match(rf"SCAN {table}\b", step), f"{name} scans {table}: {step}"
            if re.match(rf"SEARCH {table} USING INDEX sqlite_autoindex", step):
                assert f"({key})" in step, f"{name} searches {table} by part of its key: {step}"


def test_the_set_lookups_are_among_those_checked(conn: sqlite3.Connection) -> None:
    # the batch's set-based statements, which once walked a principal's every claim
    for name in ("claims_get_many", "notes_lock_many"):
        assert any(f"({KEYS[t]})" in s for s in _plan(conn, name) for t in KEYS), name

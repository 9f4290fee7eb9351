"""No CHECK constraint or partial index of pigeon's SQLite files reads an IN list of more
than two constants, and the edge's lookups of an entity's queued operations still find
them through the partial index that says "not delivered".

SQLite reads such a list through a temporary b-tree, and in a constraint or a partial
index's WHERE it fills one again for every row it writes: the operations table's status
check and its queued index cost sending and delivering a batch a third of its SQL
(edge_0008 rewrote them as comparisons). A partial index serves only the queries whose
WHERE says what its own says, so the queries changed with it.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pigeon.edge.queue import OfflineQueue
from pigeon.reference.schema import attach
from pigeon.storage.queries import load_queries
from pigeon.storage.server import open_server_db

_IN_LIST = re.compile(r"\bIN\s*\(([^()]*)\)", re.IGNORECASE)


def _made(tmp: Path) -> dict[str, Path]:
    OfflineQueue(tmp / "edge.db").close()
    db = open_server_db(tmp / "server.db")  # intake, jobs, records, operations page
    attach(db)  # and the reference app's tables
    db.close()
    return {"edge": tmp / "edge.db", "server": tmp / "server.db"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _made(tmp_path_factory.mktemp("constraints"))


def _lists(sql: str) -> list[str]:
    """The IN lists of constants (no subquery) with more than two members in ``sql``."""
    return [m[0] for m in _IN_LIST.finditer(sql) if m[1].count(",") >= 2]


@pytest.mark.parametrize("component", ["edge", "server"])
def test_no_constraint_or_partial_index_reads_a_list_of_more_than_two(
    files: dict[str, Path], component: str
) -> None:
    conn = sqlite3.connect(files[component])
    try:
        schema = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'index')"
            " AND sql IS NOT NULL"
        ).fetchall()
    finally:
        conn.close()
    assert len(schema) > 5  # the file's schema was read
    found = {f"{kind} {name}": _lists(sql) for kind, name, sql in schema if _lists(sql)}
    assert not found, f"IN lists SQLite fills a table for on every row written: {found}"


def test_the_rule_sees_such_a_list() -> None:
    assert _lists("CHECK (status IN ('a', 'b', 'c'))") == ["IN ('a', 'b', 'c')"]
    assert _lists("WHERE status IN ('a', 'b') AND id IN (SELECT x FROM t)") == []


# Each lookup of an entity's queued operations (or of them all, for a count).
QUEUED_LOOKUPS = [
    "count_held", "count_live", "deliver", "entity_tail", "promote_head", "promote_heads",
    "queued_entities", "queued_tail", "tail_behind",
]  # fmt: skip


@pytest.fixture(scope="module")
def edge(files: dict[str, Path]) -> Iterator[OfflineQueue]:
    with OfflineQueue(files["edge"]) as queue:
        yield queue


@pytest.mark.parametrize("name", QUEUED_LOOKUPS)
def test_a_queued_lookup_goes_through_the_queued_index(edge: OfflineQueue, name: str) -> None:
    tx = edge._store.read()
    sql = tx.queries[name]
    plan = tx.conn.execute("EXPLAIN QUERY PLAN " + sql, dict.fromkeys(re.findall(r":(\w+)", sql)))
    steps = [row["detail"] for row in plan]
    assert any("USING INDEX operations_queued" in step for step in steps), (name, steps)
    # The queued index, not a walk of the delivered rows kept for a week.
    assert not [s for s in steps if re.fullmatch(r"SCAN (operations|o|next)", s)], (name, steps)


def test_the_oldest_owed_job_is_read_through_the_owed_index(files: dict[str, Path]) -> None:
    sql = load_queries("sqlite", "ops")["oldest_owed"]
    conn = sqlite3.connect(files["server"])
    try:
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, {"name": "n"})]
    finally:
        conn.close()
    assert any("USING INDEX pigeon_jobs_owed" in step for step in plan), plan

"""``QuerySet``: a component's named SQL, chosen for the backend of the transaction that
runs it, so that the component's code never reads ``tx.backend``."""

from __future__ import annotations

from pathlib import Path

import pytest

from pigeon.storage.queries import QuerySet, load_queries
from pigeon.storage.server import open_server_db

OPS = QuerySet("ops")


def test_a_named_statement_runs_in_the_transactions_backend(server_db_url: str) -> None:
    db = open_server_db(server_db_url)
    try:
        with db.transaction() as tx:
            assert OPS.text(tx, "action_log") == load_queries(tx.backend, "ops")["action_log"]
            params = {"at": 1.0, "actor": "ann", "action": "retry", "reason": "why",
                      "selection": "{}", "matched": 0, "done": 0, "skipped": 0}  # fmt: skip
            # RETURNING id on both backends: the new row's id, whatever the driver.
            first = OPS.run(tx, "action_insert", params).fetchall()
            second = OPS.run(tx, "action_insert", params).fetchall()
            assert [len(first), len(second)] == [1, 1]
            assert second[0]["id"] == first[0]["id"] + 1
            logged = OPS.run(tx, "action_log", {"limit": 5}).fetchall()
            assert [row["id"] for row in logged] == [second[0]["id"], first[0]["id"]]
    finally:
        db.close()


def test_an_unknown_name_is_refused_naming_the_file(tmp_path: Path) -> None:
    db = open_server_db(tmp_path / "server.db")
    try:
        with (
            pytest.raises(KeyError, match=r"no query 'no_such' in sqlite/ops\.sql"),
            db.transaction() as tx,
        ):
            OPS.text(tx, "no_such")
    finally:
        db.close()


def test_a_component_outside_the_library_names_its_package(server_db_url: str) -> None:
    """The reference app keeps its SQL in its own package (``pigeon/reference/sql``)."""
    from pigeon.reference.schema import REFERENCE, attach

    queries = QuerySet(REFERENCE.name, REFERENCE.package)
    db = open_server_db(server_db_url)
    try:
        attach(db)
        with db.transaction() as tx:
            assert queries.text(tx, "note_get") == REFERENCE.queries(tx.backend)["note_get"]
            assert queries.run(tx, "note_get", {"principal": "ann", "id": "none"}).fetchall() == []
    finally:
        db.close()


def test_run_rows_reads_the_shape_of_a_block_from_its_code_not_its_comments() -> None:
    from pigeon.storage.queries import _takes_array

    assert _takes_array("INSERT INTO t SELECT value FROM json_each(:rows)")
    assert _takes_array("INSERT INTO t SELECT e FROM jsonb_array_elements(%(rows)s::jsonb) e")
    one_row = "-- one row at a time; the JSON form would read :rows\nINSERT INTO t VALUES (?1, ?2)"
    assert not _takes_array(one_row)
    assert not _takes_array("INSERT INTO t VALUES (:rowset, :rows_seen)")

"""The reference app's tables are its own schema component: a server database without the
app has none of them; creating the app (or ``pigeon serve``) makes them."""

from __future__ import annotations

from pathlib import Path

from pigeon.reference.notes import create_notes_app
from pigeon.reference.schema import REFERENCE, attach
from pigeon.server.app import create_app
from pigeon.server.intake import Intake
from pigeon.storage.base import Database, Tx
from pigeon.storage.schema import record_version, run_sqlite_script
from pigeon.storage.server import open_server_db

REFERENCE_TABLES = {"ref_notes", "ref_effect_ledger", "ref_resources", "ref_write_outcomes"}


def tables(db: Database) -> set[str]:
    with db.transaction() as tx:
        rows = tx.sql(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
            if db.backend == "sqlite"
            else "SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    return {r["name"] for r in rows}


def test_a_plain_server_database_has_no_reference_tables(db: Database) -> None:
    create_app(Intake(db), purge_interval=None)  # an application of its own, no reference app
    names = tables(db)
    assert not {n for n in names if n.startswith("ref_")}
    assert {n for n in names if not n.startswith("pigeon_")} <= {"sqlite_sequence"}
    with db.transaction() as tx:
        components = {r["component"] for r in tx.sql("SELECT component FROM pigeon_schema")}
    assert components == {"server"}


def test_the_reference_app_makes_its_own_tables(db: Database) -> None:
    create_notes_app(db, purge_interval=None)
    assert tables(db) >= REFERENCE_TABLES
    with db.transaction() as tx:
        components = {r["component"] for r in tx.sql("SELECT component FROM pigeon_schema")}
    assert components == {"server", "reference"}


def _outcome(tx: Tx, n: int) -> None:
    tx.sql(
        "INSERT INTO ref_write_outcomes (principal, collection, id, idempotency_key,"
        " operation_id, outcome, clock, raw_clock, version, payload, recorded_at)"
        f" VALUES ('alice', 'docs', 'd{n}', 'k{n}', 'op{n}', 'won', 'c', 'c', 1, '{{}}', 1.0)"
    )


def test_the_outcome_check_rewrite_keeps_rows_and_never_gives_a_number_twice(
    tmp_path: Path,
) -> None:
    # reference_0002 makes ref_write_outcomes again (its check as comparisons): the rows
    # keep their seq, and seq goes on past the last one ever given, deleted or not.
    db = open_server_db(tmp_path / "server.db")
    (_, first), *_ = REFERENCE.migrations("sqlite")
    with db.transaction() as tx:
        run_sqlite_script(tx.sql, first)
        record_version(tx, REFERENCE.name, 1)
        for n in (1, 2, 3):
            _outcome(tx, n)
        tx.sql("DELETE FROM ref_write_outcomes WHERE seq = 3")
    assert attach(db) == len(REFERENCE.migrations("sqlite")) > 1
    with db.transaction() as tx:
        _outcome(tx, 4)
        rows = [(r["seq"], r["id"]) for r in tx.sql("SELECT seq, id FROM ref_write_outcomes")]
        made = tx.sql("SELECT sql FROM sqlite_master WHERE name = 'ref_write_outcomes'")
        sql = made.fetchone()["sql"]
    db.close()
    assert sorted(rows) == [(1, "d1"), (2, "d2"), (4, "d4")]
    assert "outcome = 'merged'" in sql and " IN (" not in sql

"""The reference app's tables are its own schema component: a server database without the
app has none of them; creating the app (or ``pigeon serve``) makes them."""

from __future__ import annotations

from pigeon.reference.notes import create_notes_app
from pigeon.server.app import create_app
from pigeon.server.intake import Intake
from pigeon.storage.base import Database

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

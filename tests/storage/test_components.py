"""Schema components (`pigeon.storage.schema`): each has its own numbered migrations and
its own version, recorded in ``pigeon_schema`` on both backends; SQLite's header keeps the
file's own component's version, for older pigeons."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.exceptions import ConfigurationError, SchemaTooNew
from pigeon.reference.schema import REFERENCE, attach
from pigeon.storage.base import Database
from pigeon.storage.queries import migrations
from pigeon.storage.schema import Component, run_sqlite_script, split_statements
from pigeon.storage.server import SERVER_APPLICATION_ID, open_server_db, server_queries
from pigeon.storage.sqlite import SQLiteDatabase


def versions(db: Database) -> dict[str, int]:
    with db.transaction() as tx:
        return {r["component"]: int(r["version"]) for r in tx.sql("SELECT * FROM pigeon_schema")}


def test_each_component_records_its_own_version(db: Database, server_db_url: str) -> None:
    server = len(migrations(db.backend, "server"))
    assert versions(db) == {"server": server}
    reference = len(REFERENCE.migrations(db.backend))
    assert attach(db) == reference
    assert attach(db) == reference  # again: nothing to do, nothing changes
    assert versions(db) == {"server": server, "reference": reference}
    if db.backend == "sqlite":
        conn = sqlite3.connect(server_db_url)
        try:  # the header: the server's own version, which an older pigeon reads
            assert conn.execute("PRAGMA user_version").fetchone() == (server,)
        finally:
            conn.close()
    db.close()
    again = open_server_db(server_db_url)  # reopening migrates nothing and forgets nothing
    try:
        assert versions(again) == {"server": server, "reference": reference}
    finally:
        again.close()


def test_a_component_newer_than_this_pigeon_is_refused_untouched(db: Database) -> None:
    attach(db)
    with db.transaction() as tx:
        tx.sql("UPDATE pigeon_schema SET version = 99 WHERE component = 'reference'")
    with pytest.raises(SchemaTooNew, match="reference schema version 99"):
        attach(db)
    assert versions(db)["reference"] == 99


def test_a_sqlite_file_with_the_header_alone_gets_its_row(tmp_path: Path) -> None:
    """As the previous release left a file at the latest schema: user_version, no table."""
    path = tmp_path / "server.db"
    conn = sqlite3.connect(path, isolation_level=None)
    steps = migrations("sqlite", "server")
    conn.execute("BEGIN IMMEDIATE")
    for number, script in steps:
        run_sqlite_script(conn.execute, script)
        conn.execute(f"PRAGMA user_version = {number}")
    conn.execute(f"PRAGMA application_id = {SERVER_APPLICATION_ID}")
    conn.execute("COMMIT")
    conn.close()

    def table(path: Path) -> list[tuple[str, int]]:
        check = sqlite3.connect(path)
        try:
            if not check.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'pigeon_schema'"
            ).fetchone():
                return []
            return list(check.execute("SELECT component, version FROM pigeon_schema"))
        finally:
            check.close()

    # A reader that must not upgrade writes nothing, and takes the header's word.
    SQLiteDatabase(
        path,
        application_id=SERVER_APPLICATION_ID,
        components=("server",),
        queries=server_queries("sqlite"),
        upgrade=False,
    ).close()
    assert table(path) == []
    open_server_db(path).close()
    assert table(path) == [("server", len(steps))]


def test_sqlite_honours_alter_table_if_exists() -> None:
    """PostgreSQL's spelling, which SQLite lacks: one migration text for both backends."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    script = (
        "CREATE TABLE old_a (x);\n"
        "-- a comment before a guarded statement\n"
        "ALTER TABLE IF EXISTS old_a RENAME TO new_a;\n"
        "alter table if exists missing rename to never;\n"
    )
    run_sqlite_script(conn.execute, script)
    names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert names == {"new_a"}


_COMMENT = st.from_regex(r"-- [a-z ]{0,20}", fullmatch=True)


@given(st.lists(st.tuples(st.lists(_COMMENT, max_size=3), st.integers(0, 99)), max_size=6))
def test_a_migration_splits_into_its_statements(parts: list[tuple[list[str], int]]) -> None:
    """Comments belong to no statement of their own; every statement comes back once."""
    script = "".join(
        "".join(c + "\n" for c in comments) + f"CREATE TABLE t{n} (x);\n" for comments, n in parts
    )
    script += "-- a trailing comment\n"
    found = [s.splitlines()[-1] for s in split_statements(script)]
    assert found == [f"CREATE TABLE t{n} (x);" for _, n in parts]


def test_a_component_name_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="'ref_x'"):
        Component("ref_x", package="pigeon.reference")

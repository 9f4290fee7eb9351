"""pigeon's tables as Django migrations.

Each runs pigeon's own migrations of its ``server`` component (`make_tables`: the DDL that
``pigeon migrate`` and ``open_server_db`` run on each vendor, SQLite or PostgreSQL) in
the transaction Django migrates in, up to the latest this pigeon knows, and says in
``SERVER_VERSION`` which one that was when it was written: a pigeon that adds a server
migration adds one here too (the example's tests check that the last one names the
latest), so that ``manage.py migrate`` after an upgrade brings the tables up to date.
"""

from __future__ import annotations

from typing import Any

from pigeon.storage.server import migrate_borrowed


def make_tables(apps: Any, schema_editor: Any) -> None:
    """``RunPython``: create or upgrade pigeon's tables in Django's migrating transaction."""
    connection = schema_editor.connection
    connection.ensure_connection()
    migrate_borrowed(connection.connection)

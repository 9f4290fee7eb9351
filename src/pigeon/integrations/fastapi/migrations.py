"""pigeon's tables made by the application's own migrations (SQLAlchemy 2, Alembic).

With Alembic, add pigeon's revisions to ``version_locations`` in ``alembic.ini``
(``%(here)s/versions pigeon.integrations.fastapi:alembic_versions``) and run
``alembic upgrade heads``: pigeon's revisions are a branch of their own (label
``pigeon``), each bringing the tables up to the version the installed pigeon knows.
Without Alembic: ``migrate_tables(connection)`` in any migration, or ``pigeon migrate --db URL``.
"""

from __future__ import annotations

from sqlalchemy import Connection

from pigeon.storage.server import migrate_borrowed

VERSIONS = "pigeon.integrations.fastapi:alembic_versions"  # for alembic.ini's version_locations


def migrate_tables(connection: Connection) -> int:
    """Create or upgrade pigeon's tables (``pigeon_*``) in ``connection``'s transaction
    (Alembic's ``op.get_bind()``); the caller commits. Returns the schema version."""
    fairy = connection.connection
    driver, dbapi = fairy.driver_connection, fairy.dbapi_connection
    if driver is dbapi:
        return migrate_borrowed(driver)
    return migrate_borrowed(driver, via=dbapi)

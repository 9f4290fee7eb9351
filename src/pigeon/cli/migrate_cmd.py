"""``pigeon migrate``: create or upgrade pigeon's tables in the application's database.

For an application that keeps pigeon's tables beside its own (`pigeon.integrations`) and
does not run Alembic: the same statements the shipped Alembic revision runs, in one
transaction of their own. Run it again after upgrading pigeon; it changes nothing when
the tables are up to date.
"""

from __future__ import annotations

import typer

from pigeon.cli.options import DbOption
from pigeon.cli.secrets import scrub


def migrate(db: DbOption) -> None:
    """Create or upgrade pigeon's tables (pigeon_*) in an application's own database.

    The statements of the Alembic revision pigeon ships, for an application that does
    not use Alembic; run again after upgrading pigeon (nothing changes when up to date)."""
    from pigeon.storage.server import migrate_url  # the drivers only when the command runs

    version = migrate_url(db)
    typer.echo(scrub(f"pigeon's tables in {db}: schema version {version}"))

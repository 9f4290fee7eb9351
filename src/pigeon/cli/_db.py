"""Opening the server database named by a command's ``--db``, shared by the commands that
take one (``jobs``, ``worker``).

Whatever the command cannot use is refused as a usage error (exit 2) naming the file and
the reason, before anything else is opened or started: a SQLite path that does not exist
(never created: a typo would give an empty database that nothing ever writes to), or a file
that is not a pigeon server database.
"""

from __future__ import annotations

from pathlib import Path

import typer

from pigeon.exceptions import PigeonError
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(db: str) -> bool:
    return db.startswith(POSTGRES_SCHEMES)


def open_db(db: str, param_hint: str = "--db") -> Database:
    """The server database ``db`` (a SQLite path or a postgresql:// URL), or a usage error."""
    if not is_postgres(db) and not Path(db).exists():
        raise typer.BadParameter(f"{db}: no such database file", param_hint=param_hint)
    try:
        return open_server_db(db)
    except PigeonError as exc:
        raise typer.BadParameter(str(exc), param_hint=param_hint) from exc


def check_db(db: str, param_hint: str = "--db") -> None:
    """Open ``db`` once and close it: for commands that hand the name to other processes."""
    open_db(db, param_hint).close()

"""Opening the server database named by a command's ``--db``, shared by the commands that
take one (``jobs``, ``worker``, ``plan``).

Whatever the command cannot use is refused as a usage error (exit 2) naming the file and
the reason, before anything else is opened or started: a SQLite path that does not exist
(never created: a typo would give an empty database that nothing ever writes to), a file
that is not a pigeon server database, a PostgreSQL server that cannot be reached or has no
such database (found within seconds, the cause named).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer

from pigeon.exceptions import PigeonError, StoreUnavailable
from pigeon.storage.base import Database
from pigeon.storage.crypto import Keyring
from pigeon.storage.server import open_server_db

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
CONNECT_TIMEOUT = 5  # seconds for the one probe connection to PostgreSQL


def is_postgres(db: str) -> bool:
    return db.startswith(POSTGRES_SCHEMES)


def check_postgres(url: str, param_hint: str = "--db") -> None:
    """One plain connection before any pool is opened (`pigeon.storage.postgres.probe`):
    an unreachable server or a missing database is a usage error within seconds, naming
    libpq's reason, rather than a pool's 30 s of retries naming only the timeout."""
    from pigeon.extras import require_extra

    require_extra("postgres", "a PostgreSQL database")
    from pigeon.storage.postgres import probe  # the driver loads only for a PostgreSQL URL

    try:
        probe(url, CONNECT_TIMEOUT)
    except StoreUnavailable as exc:
        raise typer.BadParameter(str(exc), param_hint=param_hint) from exc


def open_db(
    db: str, param_hint: str = "--db", *, keyring: Keyring | Literal["env"] | None = "env"
) -> Database:
    """The server database ``db`` (a SQLite path or a postgresql:// URL), or a usage error.
    ``keyring``: its keys; by default those of the environment (PIGEON_KEYS or
    PIGEON_KEYS_FILE), so the commands show sealed payloads and errors in clear."""
    if is_postgres(db):
        check_postgres(db, param_hint)
    elif not Path(db).exists():
        raise typer.BadParameter(f"{db}: no such database file", param_hint=param_hint)
    try:
        keys = Keyring.from_env() if keyring == "env" else keyring
        return open_server_db(db, keyring=keys)
    except PigeonError as exc:
        raise typer.BadParameter(str(exc), param_hint=param_hint) from exc


def check_db(db: str, param_hint: str = "--db") -> None:
    """Open ``db`` once and close it: for commands that hand the name to other processes."""
    open_db(db, param_hint).close()

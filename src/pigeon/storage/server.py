"""Open the server database named by a URL: a SQLite path (default) or postgresql://..."""

from __future__ import annotations

import os

from pigeon.storage.base import Database
from pigeon.storage.crypto import Keyring, cipher_for
from pigeon.storage.queries import load_queries
from pigeon.storage.sqlite import Durability, SQLiteDatabase

SERVER_APPLICATION_ID = 0x50474E53  # "PGNS": a pigeon server database
SERVER_COMPONENTS = ("intake", "notes", "jobs", "conflicts")


def server_queries(backend: str) -> dict[str, str]:
    merged: dict[str, str] = {}
    for component in SERVER_COMPONENTS:
        try:
            queries = load_queries(backend, component)
        except FileNotFoundError:
            continue
        clash = merged.keys() & queries.keys()
        if clash:
            raise RuntimeError(f"query names defined by two components: {sorted(clash)}")
        merged.update(queries)
    return merged


def open_server_db(
    url: str | os.PathLike[str],
    *,
    durability: Durability = "full",
    keyring: Keyring | None = None,
) -> Database:
    """``keyring``: seal stored responses, job payloads and errors, record and note data
    with it (`pigeon.storage.crypto`); None stores them as they are."""
    text = os.fspath(url)
    cipher = cipher_for(keyring)
    if text.startswith(("postgresql://", "postgres://")):
        from pigeon.storage.postgres import PostgresDatabase  # psycopg only when asked for

        return PostgresDatabase(text, queries=server_queries("postgres"), cipher=cipher)
    return SQLiteDatabase(
        text,
        application_id=SERVER_APPLICATION_ID,
        components=("server",),
        queries=server_queries("sqlite"),
        durability=durability,
        cipher=cipher,
    )

"""One relay at a time per outbox: two relays would publish the same rows side by side,
out of order. Each relay started by the CLI (``pigeon relay``, ``worker --relay-to``,
``serve --relay-to``, on any number of nodes) first takes the outbox's relay lock and
stands by while another holds it; the lock dies with its holder's process, so a stand-by
takes over within seconds of a crash.

- PostgreSQL: a session advisory lock on a connection of the relay's own;
- SQLite: an exclusive ``flock`` on a file beside the database (``<db>-relay.lock``);
  relays of one SQLite file are on one machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from typing import Any, Protocol

from pigeon.storage.files import lock_file

LOCK_NAME = "pigeon_outbox_relay"


class RelayLock(Protocol):
    def acquire(self) -> bool:
        """Take the lock if it is free; True if this relay holds it (now or already)."""

    def held(self) -> bool:
        """Still held (the connection that holds it is alive)?"""

    def release(self) -> None: ...


def relay_lock(db_url: str) -> RelayLock:
    if db_url.startswith(("postgresql://", "postgres://")):
        return PostgresRelayLock(db_url)
    return FileRelayLock(os.fspath(db_url) + "-relay.lock")


class FileRelayLock:
    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> bool:
        import fcntl

        if self._fd is not None:
            return True
        fd = lock_file(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor lets the flock go
            self._fd = None


class PostgresRelayLock:
    CHECK_EVERY = 2.0  # seconds between checks that the holding connection is alive

    def __init__(self, url: str) -> None:
        self.url = url
        # A stable 64-bit key from the name (hashtext() is not promised to stay stable).
        self.key = int.from_bytes(
            hashlib.sha256(LOCK_NAME.encode()).digest()[:8], "big", signed=True
        )
        self._conn: Any = None
        self._checked = 0.0

    def acquire(self) -> bool:
        import psycopg

        if self._conn is not None:
            return self.held()
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
        except psycopg.Error:
            return False
        try:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        except psycopg.Error:
            conn.close()
            return False
        if not (row and row[0]):
            conn.close()
            return False
        self._conn = conn
        self._checked = time.monotonic()
        return True

    def held(self) -> bool:
        import psycopg

        if self._conn is None:
            return False
        if time.monotonic() - self._checked < self.CHECK_EVERY:
            return True
        try:
            self._conn.execute("SELECT 1")
        except psycopg.Error:
            self.release()  # the session (and with it the lock) is gone
            return False
        self._checked = time.monotonic()
        return True

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()  # the session's advisory lock ends with it

"""A raw read transaction for storage-level readers outside the jobs component."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pigeon.jobs.stores import store_for
from pigeon.storage.base import Database, Tx


@contextmanager
def reading(db: Database) -> Iterator[Tx]:
    """A read-only storage transaction (the jobs store's ``reading``): on SQLite a
    deferred BEGIN, so readers never queue for the write lock that claims and intakes hold.

    For storage-level readers outside the jobs component only (the operations read model,
    ``pigeon plan``), which run their own SQL on the transaction. ``pigeon.jobs`` itself
    reads through its store's sessions: ``tests/unit/jobs/test_seams.py`` keeps it so."""
    with store_for(db).reading() as session:
        yield session.tx

"""Small helpers over the storage seam shared by the jobs modules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pigeon.storage.base import Database, Tx


@contextmanager
def reading(db: Database) -> Iterator[Tx]:
    """A read-only storage transaction (the jobs store's ``reading``): on SQLite a
    deferred BEGIN, so readers never queue for the write lock that claims and intakes hold.

    For storage-level readers outside the jobs component only (the operations read model,
    ``pigeon plan``), which run their own SQL on the transaction. ``pigeon.jobs`` itself
    reads through its store's sessions: ``tests/unit/jobs/test_seams.py`` keeps it so."""
    from pigeon.jobs.stores import store_for  # the stores import this module

    with store_for(db).reading() as session:
        yield session.tx


def rowcount(cursor: Any) -> int:
    return int(getattr(cursor, "rowcount", 0) or 0)


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)

"""Small helpers over the storage seam shared by the jobs modules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pigeon.storage.base import Database, Tx


@contextmanager
def reading(db: Database) -> Iterator[Tx]:
    """A read-only transaction: on SQLite a deferred BEGIN, so readers never queue for the
    write lock that claims and intakes hold."""
    transaction = getattr(db, "transaction")  # noqa: B009 - keyword differs per backend
    if db.backend == "sqlite":
        with transaction(immediate=False) as tx:
            yield tx
    else:
        with transaction() as tx:
            yield tx


def rowcount(cursor: Any) -> int:
    return int(getattr(cursor, "rowcount", 0) or 0)


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)

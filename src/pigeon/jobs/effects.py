"""Atomic effects: claim (a scoped unique key) + mutation + result in one transaction.

    total = effect(db, "grade", f"answer:{answer_id}", lambda tx: write_grade(tx, ...))

A second worker, or a re-run after a crash, finds the stored result instead of running
the mutation again. On SQLite the transaction holds the write lock from its first
statement; on PostgreSQL a concurrent twin blocks on the claim's primary key and then
fails, rolling its mutation back, and its retry finds the result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from pigeon.exceptions import InvalidOperation
from pigeon.jobs._db import dumps, loads
from pigeon.storage.base import Database, Tx

T = TypeVar("T")


def effect(
    db: Database,
    scope: str,
    key: str,
    mutation: Callable[[Tx], T],
    *,
    clock: Callable[[], float] = time.time,
) -> T:
    """Run ``mutation`` once per (scope, key); its JSON result is stored and returned."""
    if not scope or not key:
        raise InvalidOperation(f"an effect needs a scope and a key, got {scope!r}/{key!r}")
    with db.transaction() as tx:
        return effect_in(tx, scope, key, mutation, now=clock())


def effect_in(tx: Tx, scope: str, key: str, mutation: Callable[[Tx], T], *, now: float) -> T:
    """The same, inside a transaction the caller already holds."""
    row = tx.fetchone("effect_get", {"scope": scope, "key": key})
    if row is not None:
        found: T = loads(row["result"])
        return found
    result = mutation(tx)
    tx.execute("effect_insert", {"scope": scope, "key": key, "result": dumps(result), "now": now})
    return result


def applied(db: Database, scope: str, key: str) -> bool:
    with db.transaction() as tx:
        return tx.fetchone("effect_get", {"scope": scope, "key": key}) is not None

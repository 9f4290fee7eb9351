"""Atomic effects: claim (a scoped unique key) + mutation + result in one transaction.

    total = effect(db, "grade", f"answer:{answer_id}", lambda tx: write_grade(tx, ...))

A second worker, or a re-run after a crash, finds the stored result instead of running
the mutation again. The claim is written before the mutation runs: on SQLite the
transaction holds the write lock from its first statement; on PostgreSQL a concurrent
twin's claim waits on the key's primary key until the first transaction ends and then
finds it taken, so the mutation (and any Python side effect in it) runs once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from pigeon.exceptions import InvalidOperation
from pigeon.jobs._db import dumps, loads
from pigeon.storage.base import Database, Tx
from pigeon.storage.sealed import EFFECT_RESULT

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
    _check(scope, key)
    with db.transaction() as tx:
        return _claim_and_run(tx, scope, key, mutation, clock())


def effect_in(tx: Tx, scope: str, key: str, mutation: Callable[[Tx], T], *, now: float) -> T:
    """The same, inside a transaction the caller already holds. A mutation that raises
    takes its claim with it (a savepoint), even if the caller goes on and commits."""
    _check(scope, key)
    with tx.savepoint():
        return _claim_and_run(tx, scope, key, mutation, now)


def _check(scope: str, key: str) -> None:
    if not scope or not key:
        raise InvalidOperation(f"an effect needs a scope and a key, got {scope!r}/{key!r}")


def _claim_and_run(tx: Tx, scope: str, key: str, mutation: Callable[[Tx], T], now: float) -> T:
    ids = {"scope": scope, "key": key}
    if tx.fetchone("effect_claim", {**ids, "now": now}) is None:
        row = tx.fetchone("effect_get", ids)
        assert row is not None  # the claim conflicted with a committed one
        found: T = loads(tx.cipher.open(row["result"], *EFFECT_RESULT.ad, scope, key))
        return found
    result = mutation(tx)
    sealed = tx.cipher.seal(dumps(result), *EFFECT_RESULT.ad, scope, key)
    tx.execute("effect_set_result", {**ids, "result": sealed})
    return result


def applied(db: Database, scope: str, key: str) -> bool:
    with db.transaction() as tx:
        return tx.fetchone("effect_get", {"scope": scope, "key": key}) is not None

"""Atomic effects: claim (a scoped unique key) + mutation + result in one transaction.

    total = effect(db, "grade", f"answer:{answer_id}", lambda tx: write_grade(tx, ...))

A second worker, or a re-run after a crash, finds the stored result instead of running
the mutation again. The claim is written before the mutation runs: on SQLite the
transaction holds the write lock from its first statement; on PostgreSQL a concurrent
twin's claim waits on the key's primary key until the first transaction ends and then
finds it taken, so the mutation (and any Python side effect in it) runs once.

The mutation writes the application's own rows, so it runs in the transaction of the
claim and receives it: a storage ``Tx`` (``effect_in`` joins one the caller holds). The
claim and its result are the jobs store's statements, reached through its session.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from pigeon.exceptions import InvalidOperation
from pigeon.jobs.rows import dumps, loads
from pigeon.jobs.store import EffectSession, JobStore
from pigeon.jobs.stores import session_for, store_for
from pigeon.storage.base import Database, Tx

T = TypeVar("T")


def effect(
    db: Database | JobStore[EffectSession],
    scope: str,
    key: str,
    mutation: Callable[[Tx], T],
    *,
    clock: Callable[[], float] = time.time,
) -> T:
    """Run ``mutation`` once per (scope, key); its JSON result is stored and returned."""
    _check(scope, key)
    with store_for(db).transaction() as session:
        return _claim_and_run(session, scope, key, mutation, clock())


def effect_in(tx: Tx, scope: str, key: str, mutation: Callable[[Tx], T], *, now: float) -> T:
    """The same, inside a transaction the caller already holds. A mutation that raises
    takes its claim with it (a savepoint), even if the caller goes on and commits."""
    _check(scope, key)
    with tx.savepoint():
        return _claim_and_run(session_for(tx), scope, key, mutation, now)


def _check(scope: str, key: str) -> None:
    if not scope or not key:
        raise InvalidOperation(f"an effect needs a scope and a key, got {scope!r}/{key!r}")


def _claim_and_run(
    session: EffectSession, scope: str, key: str, mutation: Callable[[Tx], T], now: float
) -> T:
    if not session.claim_effect(scope, key, now):
        stored = session.effect_result(scope, key)
        assert stored is not None  # the claim conflicted with a committed one
        found: T = loads(stored)
        return found
    result = mutation(session.tx)
    session.set_effect_result(scope, key, dumps(result))
    return result


def effect_result(tx: Tx, scope: str, key: str) -> Any:
    """The stored result of the effect (scope, key), read in ``tx`` (opened if sealed);
    None if it has not run (or stored None)."""
    session: EffectSession = session_for(tx)
    stored = session.effect_result(scope, key)
    return None if stored is None else loads(stored)


def applied(db: Database | JobStore[EffectSession], scope: str, key: str) -> bool:
    with store_for(db).transaction() as session:
        return session.effect_result(scope, key) is not None

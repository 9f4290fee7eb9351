"""The idempotency store in memory: the intake's policy without a database.

``MemoryDatabase`` keeps tables of rows in dicts, with transactions whose writes are
undone when they (or a savepoint of theirs) fail, one transaction at a time (as SQLite's
one writer). ``MemoryIdempotencyStore`` keeps the claims there with the rules of the SQL
stores (``pigeon.server.idempotency.decide_claim`` reads the same rows), so the unit tier runs
the intake's claim, replay, in-progress, validation and batch rules in milliseconds. A
handler's ``ctx.tx`` runs no SQL here: it is for policy, not for applications.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pigeon.exceptions import ConfigurationError, InvalidState
from pigeon.server.idempotency import (
    CLAIM_WAIT,
    PURGE_BATCH,
    Claim,
    ClaimDecision,
    ClaimOutcome,
    IdempotencyPolicy,
    StoredResponse,
    check_claim_wait,
    decide_claim,
    headers_json,
    held_if_free,
    new_token,
    stored_response,
)
from pigeon.storage.base import Row, Tx
from pigeon.storage.crypto import PLAIN, Cipher

_MISSING: Any = object()


class MemoryTx:
    """A transaction over a ``MemoryDatabase``: every write remembers what it replaced."""

    backend = "memory"
    cipher: Cipher = PLAIN  # nothing leaves the process: nothing is sealed

    def __init__(self, db: MemoryDatabase, *, writable: bool = True) -> None:
        self.db = db
        self.writable = writable
        self._undo: list[tuple[dict[Any, Row], Any, Any]] = []

    def table(self, name: str) -> dict[Any, Row]:
        return self.db.tables.setdefault(name, {})

    def get(self, name: str, key: Any) -> Row | None:
        return self.table(name).get(key)

    def put(self, name: str, key: Any, row: Row) -> None:
        self._may_write()
        table = self.table(name)
        self._undo.append((table, key, table.get(key, _MISSING)))
        table[key] = row

    def delete(self, name: str, key: Any) -> None:
        self._may_write()
        table = self.table(name)
        self._undo.append((table, key, table.get(key, _MISSING)))
        table.pop(key, None)

    def _may_write(self) -> None:
        if not self.writable:  # as SQLite's query_only and PostgreSQL's READ ONLY refuse
            raise InvalidState("a read-only transaction of the in-memory store: no writes")

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        mark = len(self._undo)
        try:
            yield
        except BaseException:
            self.rollback(mark)
            raise

    def rollback(self, mark: int = 0) -> None:
        while len(self._undo) > mark:
            table, key, old = self._undo.pop()
            if old is _MISSING:
                table.pop(key, None)
            else:
                table[key] = old

    def _no_sql(self, *_: Any, **__: Any) -> Any:
        raise NotImplementedError("the in-memory store runs no SQL")

    execute = fetchone = fetchall = executemany = sql = sql_many = _no_sql


class MemoryDatabase:
    """Tables of rows in dicts, one write transaction at a time."""

    backend = "memory"
    cipher: Cipher = PLAIN

    def __init__(self) -> None:
        self.tables: dict[str, dict[Any, Row]] = {}
        self.lock = threading.RLock()  # held by each transaction: one at a time

    @contextlib.contextmanager
    def transaction(self, *, writable: bool = True) -> Iterator[MemoryTx]:
        with self.lock:
            tx = MemoryTx(self, writable=writable)
            try:
                yield tx
            except BaseException:
                tx.rollback()
                raise

    def reading(self) -> contextlib.AbstractContextManager[MemoryTx]:
        return self.transaction()

    def close(self) -> None:
        self.tables.clear()


def _memory(tx: Tx | MemoryTx) -> MemoryTx:
    if not isinstance(tx, MemoryTx):
        raise ConfigurationError(f"the in-memory store works in its own transactions, not {tx!r}")
    return tx


CLAIMS = "pigeon_idempotency_claims"


class MemoryIdempotencyStore:
    """``IdempotencyStore`` over a ``MemoryDatabase`` (the same rows as the SQL table)."""

    single_writer = True

    def __init__(
        self,
        db: MemoryDatabase | None = None,
        policy: IdempotencyPolicy | None = None,
        *,
        now: Callable[[], float] | None = None,
        claim_wait: float = CLAIM_WAIT,
    ) -> None:
        self.db = db or MemoryDatabase()
        self.policy = policy or IdempotencyPolicy()
        self.now = now or time.time
        self.claim_wait = check_claim_wait(claim_wait)

    def transaction(self) -> contextlib.AbstractContextManager[Tx]:
        return self.db.transaction()

    def read_only(self) -> contextlib.AbstractContextManager[Tx]:
        return self.db.transaction(writable=False)

    def turn_at_once(self) -> contextlib.AbstractContextManager[bool]:
        return held_if_free(self.db.lock)

    def claim(
        self,
        tx: Tx,
        *,
        principal: str,
        key: str,
        fingerprint: str,
        method: str,
        path: str,
        operation_id: str,
    ) -> ClaimDecision:
        mtx, now = _memory(tx), self.now()
        claim = Claim(principal, key, new_token(), operation_id)
        row = mtx.get(CLAIMS, (principal, key))
        outcome = decide_claim(row, fingerprint, now)
        if outcome is ClaimOutcome.FRESH or outcome is ClaimOutcome.TAKE_OVER:
            mtx.put(
                CLAIMS,
                (principal, key),
                {
                    "principal": principal,
                    "idem_key": key,
                    "fingerprint": fingerprint,
                    "method": method,
                    "path": path,
                    "operation_id": operation_id,
                    "state": "in_progress",
                    "lock_token": claim.token,
                    "locked_until": now + self.policy.lock_timeout,
                    "status": None,
                    "response_headers": None,
                    "response_body": None,
                    "body_format": None,
                    "created_at": now,
                    "completed_at": None,
                    "response_expires_at": None,
                    "claim_expires_at": now + self.policy.claim_retention,
                },
            )
            return ClaimDecision(outcome, claim=claim, operation_id=operation_id)
        assert row is not None
        if outcome is ClaimOutcome.IN_PROGRESS:
            wait = max(1, math.ceil(row["locked_until"] - now))
            return ClaimDecision(outcome, operation_id=row["operation_id"], retry_after=wait)
        if outcome is ClaimOutcome.MISMATCH:
            return ClaimDecision(outcome, operation_id=row["operation_id"])
        return ClaimDecision(
            outcome,
            response=stored_response(row) if outcome is ClaimOutcome.REPLAY else None,
            operation_id=row["operation_id"],
            original_status=row["status"],
            completed_at=row["completed_at"],
        )

    def _held(self, mtx: MemoryTx, claim: Claim) -> Row | None:
        row = mtx.get(CLAIMS, (claim.principal, claim.key))
        if row is None or row["state"] != "in_progress" or row["lock_token"] != claim.token:
            return None
        return row

    def _update(self, tx: Tx, claim: Claim, **changes: Any) -> bool:
        mtx = _memory(tx)
        row = self._held(mtx, claim)
        if row is None:
            return False
        mtx.put(CLAIMS, (claim.principal, claim.key), row | changes)
        return True

    def fence(self, tx: Tx, claim: Claim) -> bool:
        return self._held(_memory(tx), claim) is not None

    def renew(self, tx: Tx, claim: Claim) -> bool:
        return self._update(tx, claim, locked_until=self.now() + self.policy.lock_timeout)

    def complete(
        self, tx: Tx, claim: Claim, response: StoredResponse, *, last: bool = False
    ) -> bool:
        now = self.now()
        return self._update(
            tx,
            claim,
            state="completed",
            status=response.status,
            response_headers=headers_json(response.headers),
            response_body=response.body,
            body_format=response.body_format,
            completed_at=now,
            response_expires_at=now + self.policy.response_retention,
            lock_token=None,
            locked_until=None,
        )

    def release(self, tx: Tx, claim: Claim) -> bool:
        mtx = _memory(tx)
        if self._held(mtx, claim) is None:
            return False
        mtx.delete(CLAIMS, (claim.principal, claim.key))
        return True

    def get(self, tx: Tx, principal: str, key: str) -> Row | None:
        return _memory(tx).get(CLAIMS, (principal, key))

    def purge(self, tx: Tx, limit: int = PURGE_BATCH) -> tuple[int, int]:
        mtx, now = _memory(tx), self.now()
        rows = list(mtx.table(CLAIMS).items())
        due = sorted(
            (
                (row["response_expires_at"], key)
                for key, row in rows
                if row["state"] == "completed"
                and row["response_body"] is not None
                and row["response_expires_at"] <= now
            ),
        )[:limit]
        for _, key in due:
            row = mtx.get(CLAIMS, key)
            assert row is not None
            changes = {"response_body": None, "response_headers": None, "response_expires_at": None}
            mtx.put(CLAIMS, key, row | changes)
        dead = sorted(
            (row["claim_expires_at"], key)
            for key, row in rows
            if row["claim_expires_at"] <= now
            and (row["state"] == "completed" or row["locked_until"] <= now)
        )[:limit]
        for _, key in dead:
            mtx.delete(CLAIMS, key)
        return len(due), len(dead)

    def stats(self, tx: Tx) -> Mapping[str, int]:
        rows = list(_memory(tx).table(CLAIMS).values())
        return {
            "claims": len(rows),
            "in_progress": sum(r["state"] == "in_progress" for r in rows),
            "responses": sum(r["response_body"] is not None for r in rows),
        }

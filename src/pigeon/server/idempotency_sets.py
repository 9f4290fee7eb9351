"""Claims of a whole batch at once: the multi-row statements of the set-based batch path
(`pigeon.server.intake_set`), beside the one-key claims of ``IdempotencyStore``.

``claim_many`` takes every free key of a batch in ONE call and reads the rows of the keys
that were taken already in one more statement (only when there are any), so replays,
mismatches and keys in progress are known for the whole batch at once; ``complete_many``
stores the answers of many claimed keys in ONE call. A call is one statement over a JSON
array on PostgreSQL (one round trip), and on SQLite one row's statement stepped for each
key by ``executemany`` (no round trips to save, and SQLite's JSON functions cost more than
bound parameters). The rules are the one-key claim's (``decide_claim``,
``IdempotencyPolicy``), the statements named blocks of each backend's ``intake.sql``;
``idempotency_stores.set_claims`` says which stores have them and runs them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pigeon.server.idempotency import (
    BODY_AD,
    ClaimDecision,
    ClaimOutcome,
    IdempotencyPolicy,
    decide_claim,
    new_token,
    stored_response,
)
from pigeon.storage.base import Row, Tx

__all__ = ["Answer", "Ask", "SetClaims", "Taken"]

# An answer to store: (key, lock token, status, headers as [name, value] pairs, body text).
Answer = tuple[str, str, int, Sequence[Sequence[str]], str]


@dataclass(slots=True)  # not frozen, and why: pigeon.server.operations
class Ask:
    """One key a batch asks for, with what its claim row records."""

    key: str
    fingerprint: str
    method: str
    path: str
    operation_id: str


@dataclass(frozen=True, slots=True)
class Taken:
    """What a batch's claim found: the claims it now holds, by key, and for each key that
    had a live row already what the one-key claim would have decided for it (a decision
    with no claim: a replay, "already applied", a mismatch, in progress) or None where it
    would have taken the key over (an expired claim: that one runs the one-key way)."""

    tokens: dict[str, str]  # the claims it now holds: key -> its lock token
    held: dict[str, ClaimDecision | None]


class SetClaims:
    """The multi-row claims over named SQL, with the store's ``policy`` and clock."""

    def __init__(self, policy: IdempotencyPolicy, now: Callable[[], float]) -> None:
        self.policy = policy
        self.now = now

    def claim_many(self, tx: Tx, principal: str, asks: Sequence[Ask]) -> Taken:
        """Claim every key of ``asks`` (each key once) that has no row yet."""
        now = self.now()
        batch = new_token()  # one unique token per batch; each claim's is it and its place
        tokens = {a.key: f"{batch}.{i:x}" for i, a in enumerate(asks)}
        rows = [
            [a.key, a.fingerprint, a.method, a.path, a.operation_id, tokens[a.key]] for a in asks
        ]
        times = {
            "locked_until": now + self.policy.lock_timeout,
            "claim_expires_at": now + self.policy.claim_retention,
            "now": now,
        }
        if self.inserted(tx, principal, rows, times) == len(asks):
            return Taken(tokens, {})
        keys = json.dumps([a.key for a in asks], ensure_ascii=False)
        found = tx.fetchall("claims_get_many", {"principal": principal, "keys": keys})
        rows_by_key = {row["idem_key"]: row for row in found}
        ours = {k for k, row in rows_by_key.items() if row["lock_token"] == tokens[k]}
        held = {
            a.key: self._decision(rows_by_key.get(a.key), a, now, tx)
            for a in asks
            if a.key not in ours
        }
        return Taken({k: tokens[k] for k in ours}, held)

    def inserted(
        self, tx: Tx, principal: str, rows: list[list[str]], times: Mapping[str, float]
    ) -> int:
        """How many claims ``claims_insert_many`` made of ``rows`` ([key, fingerprint,
        method, path, operation_id, lock token] each), with ``times`` (``now``,
        ``locked_until``, ``claim_expires_at``): each backend runs it its own way."""
        raise NotImplementedError

    def _decision(self, row: Row | None, ask: Ask, now: float, tx: Tx) -> ClaimDecision | None:
        outcome = decide_claim(row, ask.fingerprint, now)
        if row is None or outcome in (ClaimOutcome.FRESH, ClaimOutcome.TAKE_OVER):
            return None
        if outcome is ClaimOutcome.IN_PROGRESS:
            wait = max(1, math.ceil(row["locked_until"] - now))
            return ClaimDecision(outcome, operation_id=row["operation_id"], retry_after=wait)
        if outcome is ClaimOutcome.MISMATCH:
            return ClaimDecision(outcome, operation_id=row["operation_id"])
        replay = outcome is ClaimOutcome.REPLAY
        return ClaimDecision(
            outcome,
            response=stored_response(row, tx.cipher) if replay else None,
            operation_id=row["operation_id"],
            original_status=row["status"],
            completed_at=row["completed_at"],
        )

    def complete_many(self, tx: Tx, principal: str, answers: Sequence[Answer]) -> int:
        """Store each answer under its claim; how many claims were still ours."""
        if not answers:
            return 0
        now = self.now()
        seal = tx.cipher.seal
        rows = [
            (key, token, status, headers, seal(body, *BODY_AD, principal, key))
            for key, token, status, headers, body in answers
        ]
        times = {"now": now, "response_expires_at": now + self.policy.response_retention}
        return self.completed(tx, principal, rows, times)

    def completed(
        self, tx: Tx, principal: str, rows: list[Answer], times: Mapping[str, float]
    ) -> int:
        """How many claims ``claims_complete_many`` completed of ``rows`` (answers, their
        bodies sealed), with ``times`` (``now``, ``response_expires_at``)."""
        raise NotImplementedError

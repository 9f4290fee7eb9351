"""Claims of a whole batch at once: the multi-row statements of the set-based batch path
(`pigeon.server.intake_set`), beside the one-key claims of ``IdempotencyStore``.

``read_many`` reads the rows of every key of a batch in ONE statement, so replays,
mismatches and keys in progress are known for the whole batch before anything is applied;
``store_many`` writes the claims of the operations applied, already completed with their
answers, in ONE call, after their effects and in the same transaction. Where the one-key
claim writes a row in progress and then completes it, a batch writes each row once: no
other transaction can see a row in progress before the commit anyway, and a key another
transaction claimed meanwhile (on PostgreSQL: SQLite has one writer) fails
``store_many``'s statement as a duplicate key (`storage.errors.duplicate_row`), which
gives the attempt up (`intake_set.SetAbandoned`), as a store counting fewer rows than
asked does.
A call is one statement over a JSON array on PostgreSQL (on pigeon's own transaction
sent with the COMMIT, its count unread: it stores every row or fails, and then nothing
commits), and on SQLite one row's statement stepped for each key by ``executemany`` (no
round trips to save, and SQLite's JSON functions cost more than bound parameters). The
rules are the one-key claim's (``decide_claim``, ``IdempotencyPolicy``), the statements
named blocks of each backend's ``intake.sql``; ``idempotency_stores.set_claims`` says
which stores have them and runs them.
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
    headers_json,
    stored_response,
)
from pigeon.storage.base import Row, Tx

__all__ = ["Answer", "Ask", "Found", "SetClaims"]


@dataclass(slots=True)  # not frozen, and why: pigeon.server.operations
class Ask:
    """One key a batch asks for, with what its claim row records."""

    key: str
    fingerprint: str
    method: str
    path: str
    operation_id: str


# An answer to store: the key's ask, the status, the headers as [name, value] pairs, the
# body's text.
Answer = tuple[Ask, int, Sequence[Sequence[str]], str]


@dataclass(frozen=True, slots=True)
class Found:
    """What a batch's keys have in the store: the asks of the keys with no row (``free``,
    by key: the set path may apply them), and for each key that has one what the one-key
    claim would have decided for it (a decision with no claim: a replay, "already applied",
    a mismatch, in progress) or None where it would have taken the key over (an expired
    claim: that one runs the one-key way). ``now``: when they were read, the time the
    claims are made."""

    free: dict[str, Ask]
    held: dict[str, ClaimDecision | None]
    now: float


class SetClaims:
    """The multi-row claims over named SQL, with the store's ``policy`` and clock."""

    def __init__(self, policy: IdempotencyPolicy, now: Callable[[], float]) -> None:
        self.policy = policy
        self.now = now

    def read_many(self, tx: Tx, principal: str, asks: Sequence[Ask]) -> Found:
        """The rows of the keys of ``asks`` (each key once), in ONE statement."""
        now = self.now()
        keys = json.dumps([a.key for a in asks], ensure_ascii=False)
        found = tx.fetchall("claims_get_many", {"principal": principal, "keys": keys})
        rows_by_key = {row["idem_key"]: row for row in found}
        held = {
            a.key: self._decision(rows_by_key[a.key], a, now, tx)
            for a in asks
            if a.key in rows_by_key
        }
        return Found({a.key: a for a in asks if a.key not in rows_by_key}, held, now)

    def _decision(self, row: Row, ask: Ask, now: float, tx: Tx) -> ClaimDecision | None:
        outcome = decide_claim(row, ask.fingerprint, now)
        if outcome in (ClaimOutcome.FRESH, ClaimOutcome.TAKE_OVER):
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

    def store_many(self, tx: Tx, principal: str, answers: Sequence[Answer], claimed: float) -> int:
        """The claims of free keys, completed with their answers (``claimed``: when their
        rows were read); how many were stored. A key that has a row by now keeps it: SQLite's
        statement leaves it out, PostgreSQL's fails as a duplicate key."""
        if not answers:
            return 0
        now = self.now()
        seal = tx.cipher.seal
        rows = [
            [
                ask.key, ask.fingerprint, ask.method, ask.path, ask.operation_id, status,
                headers_json(headers), seal(body, *BODY_AD, principal, ask.key),
            ]
            for ask, status, headers, body in answers
        ]  # fmt: skip
        times = {
            "created_at": claimed,
            "claim_expires_at": claimed + self.policy.claim_retention,
            "now": now,
            "response_expires_at": now + self.policy.response_retention,
        }
        return self.stored(tx, principal, rows, times)

    def stored(
        self, tx: Tx, principal: str, rows: list[list[object]], times: Mapping[str, float]
    ) -> int:
        """How many claims ``claims_store_many`` made of ``rows`` ([key, fingerprint,
        method, path, operation_id, status, headers' JSON, body] each, the bodies sealed),
        with ``times`` (``created_at``, ``claim_expires_at``, ``now``,
        ``response_expires_at``): each backend runs it its own way."""
        raise NotImplementedError

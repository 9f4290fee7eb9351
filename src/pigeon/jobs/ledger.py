"""The obligations ledger: the recorded states of a record after its acceptance.

Written by the job manager (attempts, obligation ends), the provider helper (provider
results) and ``records.accept``; read by ``records.get`` and the records route.
"""

from __future__ import annotations

import time
from typing import Any

from pigeon.jobs._db import dumps, rowcount
from pigeon.storage.base import Tx
from pigeon.storage.sealed import EVENT_DETAIL

# Record states (pigeon_record_events.state), in the order they usually happen.
ACCEPTED = "accepted"
ATTEMPT = "attempt"
PROVIDER_RESULT = "provider_result"
OBLIGATION_COMPLETED = "obligation_completed"
OBLIGATION_FAILED = "obligation_failed"
OBLIGATION_RETRIED = "obligation_retried"
OBLIGATION_CANCELLED = "obligation_cancelled"
COMPLETED = "completed"


def event(
    tx: Tx,
    record_id: str,
    obligation: str | None,
    state: str,
    detail: Any = None,
    *,
    now: float | None = None,
) -> None:
    tx.execute(
        "rec_event_insert",
        {
            "record_id": record_id,
            "obligation": obligation,
            "state": state,
            "detail": None
            if detail is None
            else tx.cipher.seal(dumps(detail), *EVENT_DETAIL.ad, record_id),
            "now": time.time() if now is None else now,
        },
    )


def settle_obligation(
    tx: Tx, record_id: str, obligation: str, status: str, detail: Any = None, *, now: float
) -> None:
    """Move one obligation to ``status``; the record completes when none is left open."""
    tx.execute("rec_lock", {"record_id": record_id})
    tx.execute(
        "obl_set_status", {"record_id": record_id, "name": obligation, "status": status, "now": now}
    )
    state = {
        "completed": OBLIGATION_COMPLETED,
        "failed": OBLIGATION_FAILED,
        "pending": OBLIGATION_RETRIED,
        "cancelled": OBLIGATION_CANCELLED,
    }[status]
    event(tx, record_id, obligation, state, detail, now=now)
    if status == "completed":
        row = tx.fetchone("obl_open_count", {"record_id": record_id})
        if row is not None and int(row["n"]) == 0:
            complete(tx, record_id, now=now)


def complete(tx: Tx, record_id: str, *, now: float) -> None:
    cursor = tx.execute("rec_complete", {"id": record_id, "now": now})
    if rowcount(cursor):
        event(tx, record_id, None, COMPLETED, None, now=now)

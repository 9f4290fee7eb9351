"""The obligations ledger: the recorded states of a record after its acceptance.

Written by the job manager (attempts, obligation ends), the provider helper (provider
results) and ``records.accept``; read by ``records.get`` and the records route.

These functions write in the caller's transaction, by design: the ledger's entries belong
to the same fact as the writes around them (an intake, a provider's settlement). They take
that transaction (a storage ``Tx``) or a jobs session and write through the jobs store's
session on it (``JobSession.ledger_event`` and friends), which holds the statements.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pigeon.exceptions import InvalidOperation

if TYPE_CHECKING:
    from pigeon.jobs.store import JobSession
    from pigeon.storage.base import Tx

# Record states (pigeon_record_events.state), in the order they usually happen.
ACCEPTED = "accepted"
ATTEMPT = "attempt"
PROVIDER_RESULT = "provider_result"
OBLIGATION_COMPLETED = "obligation_completed"
OBLIGATION_FAILED = "obligation_failed"
OBLIGATION_RETRIED = "obligation_retried"
OBLIGATION_CANCELLED = "obligation_cancelled"
COMPLETED = "completed"

# The ledger state recorded when an obligation moves to a status.
SETTLED_STATE = {
    "completed": OBLIGATION_COMPLETED,
    "failed": OBLIGATION_FAILED,
    "pending": OBLIGATION_RETRIED,
    "cancelled": OBLIGATION_CANCELLED,
}


def _session(tx: Tx | JobSession) -> JobSession:
    # Imported here: the stores import this module's states.
    from pigeon.jobs.stores import session_for

    return session_for(tx)


def event(
    tx: Tx | JobSession,
    record_id: str,
    obligation: str | None,
    state: str,
    detail: Any = None,
    *,
    now: float | None = None,
) -> None:
    now = time.time() if now is None else now
    _session(tx).ledger_event(record_id, obligation, state, detail, now)


def settle_obligation(
    tx: Tx | JobSession,
    record_id: str,
    obligation: str,
    status: str,
    detail: Any = None,
    *,
    now: float,
) -> None:
    """Move one obligation to ``status``; the record completes when none is left open."""
    if status not in SETTLED_STATE:
        raise InvalidOperation(
            f"obligation status must be one of {sorted(SETTLED_STATE)}, got {status!r}"
        )
    _session(tx).settle_obligation(record_id, obligation, status, detail, now)


def complete(tx: Tx | JobSession, record_id: str, *, now: float) -> None:
    """Mark the record completed (once: the ledger says so only the first time)."""
    session = _session(tx)
    if session.complete_record(record_id, now):
        session.ledger_event(record_id, None, COMPLETED, None, now)

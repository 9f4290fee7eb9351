"""The obligations ledger: the recorded states of a record after its acceptance.

Written by the job manager (attempts, obligation ends), the provider helper (provider
results) and ``records.accept``; read by ``records.get`` and the records route. The states
themselves are in ``pigeon.jobs.rows``, which the stores share.

These functions write in the caller's transaction, by design: the ledger's entries belong
to the same fact as the writes around them (an intake, a provider's settlement). They take
that storage ``Tx`` and write through the jobs store's session on it (a ``LedgerSession``,
which holds the statements); code that already holds a session calls it directly.
"""

from __future__ import annotations

import time
from typing import Any

from pigeon.exceptions import InvalidOperation
from pigeon.jobs.rows import COMPLETED, SETTLED_STATE
from pigeon.jobs.store import LedgerSession
from pigeon.jobs.stores import session_for
from pigeon.storage.base import Tx


def event(
    tx: Tx,
    record_id: str,
    obligation: str | None,
    state: str,
    detail: Any = None,
    *,
    now: float | None = None,
) -> None:
    now = time.time() if now is None else now
    session_for(tx).ledger_event(record_id, obligation, state, detail, now)


def settle_obligation(
    tx: Tx,
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
    session_for(tx).settle_obligation(record_id, obligation, status, detail, now)


def complete(tx: Tx, record_id: str, *, now: float) -> None:
    """Mark the record completed (once: the ledger says so only the first time)."""
    record_completed(session_for(tx), record_id, now)


def record_completed(session: LedgerSession, record_id: str, now: float) -> None:
    """``complete`` in a session the caller holds."""
    if session.complete_record(record_id, now):
        session.ledger_event(record_id, None, COMPLETED, None, now)

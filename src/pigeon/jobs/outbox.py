"""The transactional outbox: a message for an external broker is written in the same
transaction as the record it speaks of, and a relay publishes it afterwards.

The message id is minted here, once, so every re-publication after a crash carries the
same id and the broker side can drop the duplicate.

``add`` runs inside the application's own transaction by design (the message and the
record it speaks of are one fact); it writes through the jobs store's session on that
transaction, which seals the payload and holds the statement.
"""

from __future__ import annotations

import time
from typing import Any

from pigeon.core.ids import uuid7
from pigeon.jobs.job import dump_payload
from pigeon.jobs.store import OutboxSession
from pigeon.jobs.stores import session_for
from pigeon.storage.base import Tx


def add(
    tx: Tx,
    topic: str,
    payload: Any,
    *,
    message_id: str | None = None,
    now: float | None = None,
) -> str:
    """Queue ``payload`` for ``topic`` in the caller's transaction (a storage ``Tx``);
    returns the message id."""
    mid = message_id or uuid7()
    session: OutboxSession = session_for(tx)
    session.add_outbox(
        message_id=mid,
        topic=topic,
        payload=dump_payload(payload, f"outbox message for {topic!r}"),
        now=time.time() if now is None else now,
    )
    return mid

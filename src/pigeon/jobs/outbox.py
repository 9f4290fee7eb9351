"""The transactional outbox: a message for an external broker is written in the same
transaction as the record it speaks of, and a relay publishes it afterwards.

The message id is minted here, once, so every re-publication after a crash carries the
same id and the broker side can drop the duplicate.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pigeon.jobs.job import dump_payload
from pigeon.storage.base import Tx
from pigeon.storage.sealed import OUTBOX_PAYLOAD


def add(
    tx: Tx, topic: str, payload: Any, *, message_id: str | None = None, now: float | None = None
) -> str:
    """Queue ``payload`` for ``topic`` in the caller's transaction; returns the message id."""
    mid = message_id or str(uuid.uuid4())
    tx.execute(
        "outbox_insert",
        {
            "message_id": mid,
            "topic": topic,
            "payload": tx.cipher.seal(
                dump_payload(payload, f"outbox message for {topic!r}"), *OUTBOX_PAYLOAD.ad, mid
            ),
            "now": time.time() if now is None else now,
        },
    )
    return mid

"""The unit of work on the edge: everything needed to send it again, forever."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

JSON = Any  # a value json.dumps accepts; checked at the door, not by the type system


class OpType(enum.StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"


class OpStatus(enum.StrEnum):
    PENDING = "pending"  # waiting to be sent (possibly after a backoff)
    IN_FLIGHT = "in_flight"  # handed to a sender; the server may have it
    DELIVERED = "delivered"  # a 2xx came back
    CONFLICT = "conflict"  # held for the conflict resolver
    DEAD = "dead"  # dead letter: kept with its history until retried or discarded
    # Returned by enqueue only, never stored: a DELETE that cancelled its entity's unsent
    # CREATE, so neither is sent (see pigeon.edge.coalesce).
    COALESCED = "coalesced"


@dataclass(slots=True)
class Operation:
    """One create/update/delete (or app-defined) operation made on the edge.

    `id` names the row; `idempotency_key` is what the server dedups on. Both are UUIDs
    made when the operation is made and stored in the same transaction; nothing ever
    changes the key, so every resend is recognisable as the same request.
    """

    id: str
    type: str
    entity: str
    payload: JSON
    idempotency_key: str
    endpoint: str | None = None
    method: str | None = None
    created_at: float = 0.0
    clock: str = ""
    attempts: int = 0
    next_attempt_at: float = 0.0
    last_error: str | None = None
    base_version: str | None = None
    status: OpStatus = OpStatus.PENDING
    seq: int = 0  # position in the queue: global order of creation
    history: list[dict[str, Any]] = field(default_factory=list)
    delivered_at: float | None = None
    response: JSON = None  # the body of the 2xx reply, when the sender passed it on
    # Pending behind its entity's dead head: not sent until that one is retried (it goes
    # first) or discarded. Said by the listings (``pending``, ``operations``, ``get``).
    held: bool = False

    def to_wire(self) -> dict[str, Any]:
        """The operation as it appears inside a batch request (see pigeon.core.wire)."""
        wire: dict[str, Any] = {
            "id": self.id,
            "idempotency_key": self.idempotency_key,
            "type": self.type,
            "entity": self.entity,
            "method": self.method,
            "path": self.endpoint,
            "body": self.payload,
            "clock": self.clock,
        }
        if self.base_version is not None:
            wire["if_match"] = self.base_version
        return wire

"""`QueueStore`: everything the edge queue (`OfflineQueue`), and through it the sync
executor, needs from storage, declared beside them (docs/design.md, "Edge: queue, sync, transport").
`pigeon.edge.sqlite.EdgeStore` is the implementation, one SQLite file.

The queue keeps the policy (what is valid input, when a failed operation is due again,
when delivered ones are purged); the store keeps the rows and their state machine: every
method is one transaction (or a savepoint of this thread's ``batch()``), and a method that
moves an operation checks, in that transaction, that it is in a state it may leave (else
`InvalidState`; an unknown id: `NotFound`). The invariant every write keeps: on each
entity exactly the earliest queued (pending / in flight / conflict-held / dead) operation
is its head, and only pending heads are ever handed out: a dead or conflict-held head
holds its entity's later operations until it is retried, resolved or discarded.

Also here: `NewOp`, a validated operation on its way in, and `from_new`, the operation it
becomes once stored, which every implementation returns from ``append``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pigeon.core.clock import HLCTimestamp
from pigeon.core.operation import Operation, OpStatus
from pigeon.edge.stats import QueueStats

Record = Mapping[str, Any]  # one stored row, by column name
Built = Callable[[], Operation]  # builds an appended operation, after its commit
More = Callable[[], Sequence["NewOp"]]  # late joiners of a group commit (CommitBatcher)
Delivery = tuple[str, Any, str | None]  # (op_id, response, etag)
# After a failed attempt: ``(attempts, created_at) -> when it is due again``, or
# OpStatus.DEAD (a dead letter now) or OpStatus.CONFLICT (held for the resolver).
NextAttempt = Callable[[int, float], float | OpStatus]

# Hot path: every enqueue returns its payload decoded from the text it stored. That text is
# validate.encode_payload's, one JSON value with no whitespace around it, which raw_decode
# reads as json.loads would, without loads' checks and decode()'s two whitespace regexes
# (0.8 us instead of 1.9 for a typical payload).
_decode = json.JSONDecoder().raw_decode


@dataclass(slots=True)  # not frozen: a frozen __init__ costs a setattr call per field
class NewOp:
    """A validated operation on its way into the store (never changed once made)."""

    id: str
    idempotency_key: str
    type: str
    entity: str
    payload: str  # JSON text
    endpoint: str | None
    method: str | None
    created_at: float
    base_version: str | None
    clock: str = ""  # stamped inside the transaction that writes it


def from_new(new: NewOp, seq: int, status: OpStatus, /) -> Operation:
    """``new`` as stored at ``seq``. Positional: a partial of it is called once per
    enqueue, and keywords would make it merge a dict of them on every call."""
    return Operation(
        id=new.id,
        type=new.type,
        entity=new.entity,
        payload=_decode(new.payload)[0],
        idempotency_key=new.idempotency_key,
        endpoint=new.endpoint,
        method=new.method,
        created_at=new.created_at,
        clock=new.clock,
        next_attempt_at=new.created_at,
        base_version=new.base_version,
        status=status,
        seq=seq,
    )


class QueueStore(Protocol):
    @property
    def path(self) -> str: ...

    @property
    def node_id(self) -> str:
        """The node its operations' clock stamps name (the file's, or the one given)."""
        ...

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Make this thread's calls inside the block one transaction (one fsync)."""
        ...

    def in_batch(self) -> bool: ...

    def close(self) -> None: ...

    # -- writing -------------------------------------------------------------------------

    def append(self, first: Sequence[NewOp], more: More) -> list[Built | BaseException]:
        """Write ``first``, then what ``more()`` returns until it returns nothing, in one
        transaction, each stamped (in queue order, above every stamp in the store) and
        folded into its entity's unsent tail where coalescing allows. Per item: what
        builds it as stored, or the exception that item alone raised. The commit function
        of `pigeon.edge.commit.CommitBatcher`."""
        ...

    def stamp(self) -> HLCTimestamp:
        """A stamp of the store's clock above every one recorded; recorded by the next
        append or by ``close()``."""
        ...

    def dispatch(self, n: int, now: float) -> list[Operation]:
        """Up to ``n`` due heads marked in flight (owned by this store), in queue order;
        nothing while paused."""
        ...

    def deliver(self, op_id: str, response: Any, now: float) -> None:
        """In flight (or pending once sent) -> delivered; a repeat changes nothing."""
        ...

    def deliver_many(self, items: Sequence[Delivery], now: float) -> None:
        """``deliver`` for many, all or nothing; an etag becomes its entity's base
        version when this call delivers its operation."""
        ...

    def fail(
        self, op_id: str, *, error: str, kind: str, now: float, then: NextAttempt
    ) -> Operation:
        """A failed attempt of an in-flight operation, in its history; ``then`` says
        where it goes (see `NextAttempt`)."""
        ...

    def release(self, op_id: str, *, due: float, sent: bool) -> Operation:
        """In flight -> pending, no attempt spent, due at ``due``; ``sent=False``: it
        never left, so it does not count as sent (it may be folded into again)."""
        ...

    def resurrect(self, op_id: str, now: float) -> Operation:
        """A dead letter back to pending, attempts reset, in its own place (seq kept):
        ahead of its entity's operations held behind it."""
        ...

    def remove(
        self, op_id: str, *, allowed: Sequence[OpStatus], action: str, tail: bool = False
    ) -> list[Operation]:
        """Delete an operation in one of the ``allowed`` states; a pending one only if it
        was never sent (``action`` names the caller's verb in the error). ``tail``: also
        the never-sent operations waiting behind it (up to the first one sent); returns
        those."""
        ...

    def unhold(self, op_id: str, now: float) -> None:
        """A conflict-held operation due again (same key)."""
        ...

    def purge_delivered(self, before: float, limit: int) -> int:
        """Forget the oldest ``limit`` operations delivered before ``before``."""
        ...

    def set_paused(self, reason: str | None) -> None: ...

    def set_base_version(self, entity: str, version: str | None) -> None: ...

    # -- reading -------------------------------------------------------------------------

    def get(self, op_id: str) -> Operation: ...

    def live(self) -> list[Operation]:
        """Pending, in flight and conflict-held, in queue order."""
        ...

    def dead(self) -> list[Operation]: ...

    def listing(self, status: str | None, limit: int) -> list[Operation]: ...

    def stats(self, now: float) -> QueueStats:
        """Every count from one snapshot."""
        ...

    def next_due_at(self) -> float | None: ...

    @property
    def paused(self) -> str | None: ...

    def base_version(self, entity: str) -> str | None: ...

    def entity_tail(self, entity: str) -> list[Operation]:
        """The entity's live operations (pending, in flight, conflict-held), oldest first."""
        ...

    def op_id_by_seq(self, seq: int) -> str | None: ...

    # -- conflict records and base snapshots ---------------------------------------------

    def snapshot(self, entity: str) -> Record | None:
        """``version`` and ``data`` (JSON text) of the entity as the server last had it."""
        ...

    def put_snapshot(self, entity: str, version: str | None, data: str, now: float) -> None: ...

    def conflict(self, conflict_id: int) -> Record | None: ...

    def conflicts(self, outcome: str | None, limit: int) -> Sequence[Record]: ...

    def held_conflicts(self, entity: str) -> Sequence[Record]: ...

    def add_conflict(self, record: Mapping[str, Any]) -> int: ...

    def settle_conflict(self, settled: Mapping[str, Any]) -> None: ...

"""The transport seam: how the edge hands operations to the server.

A transport sends operations and reports, for each operation it attempted, what came
back (a `Reply`); it never decides what a reply means (that is
`pigeon.sync.classify`) and never touches the queue. Operations it did not attempt are
simply absent from the answer, and the executor puts them back without spending an attempt.

Transports are synchronous. The asyncio mode of the engine runs a whole sync cycle in a
worker thread because the queue underneath is blocking SQLite anyway; one blocking
implementation per transport keeps the two modes byte-for-byte identical on the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pigeon.core.operation import Operation


# Made for every operation of a batch reply: a plain slots dataclass, never changed once
# made, but not frozen (a frozen one's __init__ sets each field through object.__setattr__;
# as the server's per-operation values, pigeon.server.operations).
@dataclass(slots=True)
class Reply:
    """What came back for one operation: a status with headers and body, or an error.

    `shared` is True when the reply answered a whole batch request rather than this one
    operation (e.g. the batch POST timed out): every operation of that request gets the
    same reply object.
    """

    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    error: BaseException | None = None
    replayed: bool = False
    shared: bool = False


@dataclass(slots=True)
class Exchange:
    """The answer to `Transport.send`: replies for the operations that were attempted.

    `replies` follows the order of the request; an operation without a reply was not
    attempted (the transport stopped early: the server stopped a batch at a transient
    failure, the server was unreachable, or authorisation is needed).
    """

    replies: list[tuple[Operation, Reply]] = field(default_factory=list)
    # Operations carried by a request that went out, answered or not: one a batch reply
    # leaves out (the server stopped before it) was not applied by THAT request, but a
    # copy of the request (a network duplicate, an earlier try whose answer was lost) may
    # be applying it, so it stays marked sent: never folded into, never cancelled.
    transmitted: set[str] = field(default_factory=set)

    def attempted(self) -> set[str]:
        return {op.id for op, _ in self.replies}


KeepGoing = Callable[[Reply], bool]


@runtime_checkable
class Transport(Protocol):
    def send(
        self, operations: Sequence[Operation], *, keep_going: KeepGoing | None = None
    ) -> Exchange:
        """Send operations in order and return the replies of those attempted.

        After each reply, a False from `keep_going` stops the transport: the remaining
        operations are left unattempted.
        """
        ...

    def probe(self) -> bool:
        """Cheaply ask whether the server is reachable right now."""
        ...

    def close(self) -> None: ...

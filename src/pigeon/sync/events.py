"""What the engine tells the application: callbacks per operation, and cycle reports.

SyncCallbacks run right after the queue recorded the transition, so an operation is already
durably delivered / held / dead when its callback sees it. They run on whichever thread
ran the cycle: the background loop's, the asyncio mode's worker thread, a flush's (its
worker thread when given a timeout), or a lane's. With ``pipeline=1`` cycles take turns,
so callbacks never run two at once; with more, they may, and must be thread-safe.

A callback that raises is logged and otherwise ignored: an application bug must not stop
delivery or strand an operation in flight.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pigeon.core.operation import Operation
from pigeon.logs import failure
from pigeon.sync.classify import ReplyOutcome

log = logging.getLogger("pigeon.sync")

OperationCallback = Callable[[Operation, ReplyOutcome], Any]
PausedCallback = Callable[[str], Any]
ErrorCallback = Callable[[BaseException], Any]
EventName = Literal["on_delivered", "on_failed", "on_dead", "on_conflict", "on_paused", "on_error"]


class DeadTail(enum.StrEnum):
    """What ``on_dead`` may return: what becomes of the operations its entity made after
    the dead one (docs/design.md, "Order": a dead operation blocks its own entity).

    ``HOLD`` (or None, the default): they wait, held, until the dead one is retried (it
    goes first, in its own place) or discarded (`pigeon queue retry` / `discard`).
    ``RELEASE``: the dead one is discarded (the callback has it) and the rest go.
    ``DISCARD``: the dead one is discarded with the operations held behind it (those never
    sent), e.g. the updates of a record whose create the server refused."""

    HOLD = "hold"
    RELEASE = "release-tail"
    DISCARD = "discard-tail"


@dataclass(slots=True)
class SyncCallbacks:
    """``on_delivered``: 2xx (the server's body and ETag are on the outcome).
    ``on_failed``: a failed attempt that will be retried (transient, key in progress).
    ``on_dead``: dead-lettered (permanent, or attempts/age exhausted); it may return a
    `DeadTail` to say what becomes of its entity's later operations (default: held).
    ``on_conflict``: held for the conflict resolver (the server's version is in the body).
    ``on_paused``: 401/403, or a batch request refused as a whole (no batch route); the
    reason says which. The queue is paused until `SyncEngine.resume()`.
    ``on_error``: an exception the engine survived: a step of its background loop raised
    (it backs off and goes on), or a request could not be made (the token callable
    raised; its operations wait, no attempt spent). Also kept as `SyncEngine.last_error`."""

    on_delivered: OperationCallback | None = None
    on_failed: OperationCallback | None = None
    on_dead: OperationCallback | None = None
    on_conflict: OperationCallback | None = None
    on_paused: PausedCallback | None = None
    on_error: ErrorCallback | None = None

    def emit(self, name: EventName, *args: Any) -> Any:
        """Call the callback of ``name``; what it returned (None if it raised)."""
        callback: Callable[..., Any] | None = {
            "on_delivered": self.on_delivered,
            "on_failed": self.on_failed,
            "on_dead": self.on_dead,
            "on_conflict": self.on_conflict,
            "on_paused": self.on_paused,
            "on_error": self.on_error,
        }[name]
        if callback is None:
            return None
        try:
            return callback(*args)
        except Exception as exc:
            failure(log, "pigeon sync callback %s raised; delivery continues", name, exc=exc)
            return None


def chain(
    first: OperationCallback,
    then: OperationCallback | None,
    on_error: ErrorCallback,
) -> OperationCallback:
    """``first`` (the engine's own: a conflict resolver), then ``then`` (the app's).

    What ``first`` raises goes to ``on_error`` (the engine's ``last_error`` and
    ``on_error``): a resolver that fails is the engine failing, not an app callback to
    log and forget. ``then`` runs either way, so the app still hears of the operation."""

    def both(op: Operation, outcome: ReplyOutcome) -> None:
        try:
            first(op, outcome)
        except Exception as exc:
            failure(log, "pigeon sync: the conflict resolver raised for %s", op.id, exc=exc)
            on_error(exc)
        if then is not None:
            then(op, outcome)

    return both


@dataclass(slots=True)
class CycleReport:
    """What one executor pass did (and, summed, what an engine has done so far)."""

    taken: int = 0  # operations handed out by the queue
    delivered: int = 0
    failed: int = 0  # transient / key in progress: rescheduled
    dead: int = 0
    conflicts: int = 0
    released: int = 0  # not attempted: back to pending, no attempt spent
    replayed: int = 0  # delivered replies the server marked Idempotent-Replayed
    paused: str | None = None  # the reason, when this pass paused the queue
    unreachable: bool = False  # a request could not even connect
    # A request could not even be made here (transport.NotSent): its operations were
    # released unspent; the engine backs off as for an unreachable server, but the
    # server's reachability is not in question.
    error: BaseException | None = None
    # 429: the server asked this client (not one operation) to slow down; nothing more
    # may go out before this moment (the engine's clock).
    throttled_until: float | None = None

    @property
    def sent(self) -> int:
        return self.taken - self.released

    def add(self, other: CycleReport) -> None:
        """Sum the counters of ``other`` into this report (the flags are not summed)."""
        self.taken += other.taken
        self.delivered += other.delivered
        self.failed += other.failed
        self.dead += other.dead
        self.conflicts += other.conflicts
        self.released += other.released
        self.replayed += other.replayed

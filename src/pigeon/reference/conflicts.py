"""Conflicts the server settles itself: trusted clocks, resource rows, recorded outcomes.

Last-write-wins compares hybrid logical clock stamps made on devices, so a device whose
wall clock is wrong must not win by it. Two defences, both here:

* The device sends its clock's current stamp with each request (header
  ``X-Pigeon-Device-Clock``, e.g. ``HttpTransport(headers=resolver.headers)``). The server
  measures the device's offset (that stamp minus the server's wall clock, at arrival) and
  takes it off the stamps of the operations in the request: a phone three hours fast or
  three hours slow has its edits placed when they were really made. The measurement
  carries the network's latency as its error, milliseconds against the hours it corrects.
* Whatever the correction, no stamp is believed beyond ``max_skew`` ahead of the server's
  own clock, and the server's clock only receives stamps within that bound, so one bad
  device cannot drag the server (and every later server stamp) into the future.

The header reaches the handlers through a context variable set by `DeviceClockMiddleware`:
the intake's handler signature stays the same for every application, and Starlette runs
handlers in a worker thread with a copy of the request's context.
"""

from __future__ import annotations

import contextvars
import json
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from pigeon.core.clock import HLCTimestamp, HybridLogicalClock
from pigeon.reference import schema as ref
from pigeon.server.intake import IntakeContext
from pigeon.storage.base import Database, Row

DEVICE_CLOCK = "X-Pigeon-Device-Clock"
OUTCOMES_PATH = "/pigeon/v1/outcomes"
DEFAULT_MAX_SKEW = 60.0  # seconds a stamp may run ahead of the server's clock

_device_clock: contextvars.ContextVar[HLCTimestamp | None] = contextvars.ContextVar(
    "pigeon_device_clock", default=None
)


def device_clock() -> HLCTimestamp | None:
    """The sending device's clock stamp for the request being handled, if it sent one."""
    return _device_clock.get()


class DeviceClockMiddleware:
    """Read ``X-Pigeon-Device-Clock`` into the request's context (ignored if malformed:
    the stamps of that request are then only bounded, not corrected)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        wanted = DEVICE_CLOCK.lower().encode()
        stamp = None
        for name, value in scope.get("headers", ()):
            if name == wanted:
                try:
                    stamp = HLCTimestamp.decode(value.decode("latin-1"))
                except ValueError:
                    stamp = None
        token = _device_clock.set(stamp)
        try:
            await self.app(scope, receive, send)
        finally:
            _device_clock.reset(token)


@dataclass
class BoundedClock(HybridLogicalClock):
    """The server's clock: it receives no stamp more than ``max_skew_ms`` ahead of its wall."""

    max_skew_ms: int = int(DEFAULT_MAX_SKEW * 1000)

    def receive(self, remote: HLCTimestamp) -> HLCTimestamp:
        if remote.wall_ms > self.wall() + self.max_skew_ms:
            return self.now()
        return super().receive(remote)


def corrected(
    raw: HLCTimestamp,
    *,
    device_now: HLCTimestamp | None,
    server_wall_ms: int,
    max_skew_ms: int,
) -> HLCTimestamp:
    """The stamp ``raw`` as the server's clock would have made it (pure).

    The device's offset is ``device_now - server wall`` at arrival; an operation stamped
    ``raw`` on that device happened at ``raw - offset`` server time. Never more than
    ``max_skew_ms`` ahead of the server's wall, never below zero.
    """
    wall = raw.wall_ms
    if device_now is not None:
        wall -= device_now.wall_ms - server_wall_ms
    wall = max(0, min(wall, server_wall_ms + max_skew_ms))
    return HLCTimestamp(wall, raw.counter, raw.node)


@dataclass(frozen=True, slots=True)
class Stamped:
    """A write's stamps: ``effective`` (corrected, compared across devices) and ``raw``."""

    effective: HLCTimestamp
    raw: HLCTimestamp

    @classmethod
    def of(cls, ctx: IntakeContext, max_skew_ms: int) -> Stamped:
        raw = HLCTimestamp.decode(ctx.clock)
        server_wall = int(ctx.now * 1000)
        effective = corrected(
            raw, device_now=device_clock(), server_wall_ms=server_wall, max_skew_ms=max_skew_ms
        )
        return cls(effective, raw)

    @classmethod
    def stored(cls, row: Row) -> Stamped:
        return cls(HLCTimestamp.decode(row["clock"]), HLCTimestamp.decode(row["raw_clock"]))

    def supersedes(self, other: Stamped) -> bool:
        """Does this write replace ``other`` under last-write-wins? (pure)

        Two writes of one device are ordered by that device's own clock, which never runs
        backwards; writes of different devices by their corrected stamps.
        """
        if self.raw.node == other.raw.node:
            return self.raw > other.raw
        return self.effective > other.effective


def resource_json(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "collection": row["collection"],
        "version": int(row["version"]),
        "data": json.loads(row["data"]),
        "deleted": bool(row["deleted"]),
        "clock": row["clock"],
        "updated_at": row["updated_at"],
    }


def load(ctx: IntakeContext, collection: str, resource_id: str) -> Row | None:
    params = {"principal": ctx.principal, "collection": collection, "id": resource_id}
    return ref.fetchone(ctx.tx, "resource_get", params)


def store(
    ctx: IntakeContext,
    collection: str,
    resource_id: str,
    data: Any,
    stamped: Stamped,
    *,
    deleted: bool = False,
) -> Row | None:
    """Write the resource and return its row; None when this was to be its first write
    and another writer created it meanwhile (two devices, one new id, at once): the
    caller loads that row and settles against it like any later write."""
    params = {
        "principal": ctx.principal,
        "collection": collection,
        "id": resource_id,
        "data": json.dumps(data),
        "deleted": int(deleted),
        "clock": stamped.effective.encode(),
        "raw_clock": stamped.raw.encode(),
        "now": ctx.now,
    }
    if (
        ref.fetchone(ctx.tx, "resource_write", params) is None
        and ref.fetchone(ctx.tx, "resource_insert", params) is None
    ):
        return None
    row = ref.fetchone(ctx.tx, "resource_get", params)
    assert row is not None
    return row


def record(
    ctx: IntakeContext,
    row: Row,
    outcome: str,
    stamped: Stamped,
    payload: Any,
    other: str | None,
) -> None:
    """One settled write in ``write_outcomes``, and its effect in the notes' ledger."""
    ref.execute(
        ctx.tx,
        "outcome_append",
        {
            "principal": ctx.principal,
            "collection": row["collection"],
            "id": row["id"],
            "idempotency_key": ctx.idempotency_key,
            "operation_id": ctx.operation_id,
            "outcome": outcome,
            "clock": stamped.effective.encode(),
            "raw_clock": stamped.raw.encode(),
            "other_clock": other,
            "version": int(row["version"]),
            "payload": json.dumps(payload),
            "now": ctx.now,
        },
    )


def ledger(ctx: IntakeContext, row: Row, status: int) -> None:
    ref.execute(
        ctx.tx,
        "ledger_append",
        {
            "idempotency_key": ctx.idempotency_key,
            "principal": ctx.principal,
            "operation_id": ctx.operation_id,
            "entity": ctx.entity or f"{row['collection']}:{row['id']}",
            "method": ctx.method,
            "status": status,
            "version": int(row["version"]),
            "clock": ctx.clock,
            "now": ctx.now,
        },
    )


def read_outcomes(
    db: Database, principal: str, *, after: int = 0, limit: int = 100_000
) -> list[dict[str, Any]]:
    """The recorded outcomes of server-settled writes of one principal, in order."""
    with db.reading() as tx:
        rows = ref.fetchall(
            tx, "outcome_list", {"principal": principal, "after": after, "limit": limit}
        )
    return [{**r, "payload": json.loads(r["payload"])} for r in rows]


def read_resource(db: Database, principal: str, collection: str, resource_id: str) -> Row | None:
    with db.reading() as tx:
        params = {"principal": principal, "collection": collection, "id": resource_id}
        return ref.fetchone(tx, "resource_read", params)

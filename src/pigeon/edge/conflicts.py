"""The edge's record of conflicts: base snapshots, conflicted copies, settled outcomes.

Kept in the queue's own file (tables of migration edge_0003) and written in the queue's
transaction, so settling a conflict is one atomic step: the conflicted operation leaves
the queue, the operations waiting behind it are folded into the resolution (each recorded
as ``superseded``), the resolution is enqueued as a NEW operation with a NEW key against
the server's current version, and the conflict row says what happened. Nothing about an
edit is ever deleted without a row here that keeps it.

Every conflict-held operation of the queue has exactly one ``held`` record, so ``pigeon
conflicts list`` shows what ``pigeon queue stats`` counts and ``resolve`` can settle each:
the resolver (`pigeon.sync.resolver`) writes it for a conflict it holds for the user, an
engine without a resolver for every conflict (strategy ``none``), and `reconcile` mends
what neither wrote (a crash between the hold and its record, a file from an older pigeon)
and closes records whose operation left the queue another way (``pigeon queue discard``).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pigeon.core.operation import Operation, OpStatus, OpType
from pigeon.edge.merge import merge_patch
from pigeon.edge.queue_store import QueueStore, Record
from pigeon.exceptions import InvalidOperation, InvalidState, NotFound

RecordOutcome = Literal["held", "merged", "won", "lost", "resolved", "superseded"]
Keep = Literal["local", "remote", "both", "merged"]
KEEPS: tuple[str, ...] = ("local", "remote", "both", "merged")
# The strategy of a conflict held because no resolver was there to decide it (an engine
# without one, or `ConflictStore.reconcile`): the user decides, or a resolver takes it over
# (`pigeon.sync.resolver.ConflictResolver.sweep`).
NO_RESOLVER = "none"
_ALL = 1_000_000  # "every row" for the listings reconcile compares


class _Deleted:
    def __repr__(self) -> str:
        return "DELETED"


DELETED: Any = _Deleted()  # the local intent "this entity is gone"


@dataclass(frozen=True, slots=True)
class Snapshot:
    entity: str
    version: str | None
    data: Any


@dataclass(frozen=True, slots=True)
class ConflictRecord:
    id: int
    entity: str
    op_id: str
    idempotency_key: str
    op_type: str
    strategy: str
    outcome: str
    base: Any
    local: Any
    remote: Any
    remote_version: str | None
    result: Any
    resolution: str | None
    new_op_id: str | None
    detail: str | None
    created_at: float
    resolved_at: float | None


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _dump(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps("<deleted>" if value is DELETED else value, ensure_ascii=False)


def _record(row: Record) -> ConflictRecord:
    return ConflictRecord(
        id=row["id"],
        entity=row["entity"],
        op_id=row["op_id"],
        idempotency_key=row["idempotency_key"],
        op_type=row["op_type"],
        strategy=row["strategy"],
        outcome=row["outcome"],
        base=_load(row["base"]),
        local=_load(row["local"]),
        remote=_load(row["remote"]),
        remote_version=row["remote_version"],
        result=_load(row["result"]),
        resolution=row["resolution"],
        new_op_id=row["new_op_id"],
        detail=row["detail"],
        created_at=row["created_at"],
        resolved_at=row["resolved_at"],
    )


def local_state(ops: Sequence[Operation], base: Any) -> Any:
    """What this device believes the entity is after its live operations (pure): creates
    and PUT updates replace, PATCH updates merge (RFC 7396), deletes leave `DELETED`."""
    state = base
    for op in ops:
        method = (op.method or "").upper()
        if op.type == "delete" or method == "DELETE":
            state = DELETED
        elif method == "PATCH":
            state = merge_patch({} if state in (None, DELETED) else state, op.payload)
        else:
            state = op.payload
    return state


def _route(op: Operation, *, delete: bool) -> tuple[str, str | None, str | None]:
    """(type, method, endpoint) of an operation that writes the entity ``op`` wrote."""
    method = (op.method or "").upper()
    endpoint = op.endpoint
    if endpoint is not None and method == "POST":
        ident = op.payload.get("id") if isinstance(op.payload, dict) else None
        ident = ident if ident not in (None, "") else op.entity.partition(":")[2]
        endpoint = f"{endpoint.rstrip('/')}/{ident}"
    if endpoint is None:
        return ("delete" if delete else op.type), None, None
    return ("delete" if delete else "update"), ("DELETE" if delete else "PUT"), endpoint


class QueueWrites(Protocol):
    """The writes every user of a queue makes: `ConflictQueue` and the sync side's
    `SyncQueue` both extend it, so the signatures are declared once."""

    def enqueue(
        self,
        type: str | OpType,
        entity: str,
        payload: Any,
        *,
        endpoint: str | None = None,
        method: str | None = None,
        base_version: str | None = None,
    ) -> Operation: ...

    def batch(self) -> contextlib.AbstractContextManager[None]: ...

    def discard(self, op_id: str, *, with_tail: bool = False) -> list[Operation]: ...

    def set_base_version(self, entity: str, version: str | None) -> None: ...


class ConflictQueue(QueueWrites, Protocol):
    """What a `ConflictStore` asks of its queue (`pigeon.edge.queue.OfflineQueue`), so that
    the queue can build its store without the two modules importing each other."""

    @property
    def path(self) -> str: ...

    @property
    def store(self) -> QueueStore: ...

    def operations(
        self, status: OpStatus | str | None = None, limit: int = 1000
    ) -> list[Operation]: ...

    def cancel(self, op_id: str) -> None: ...


class ConflictStore:
    """Conflict records and base snapshots of one `OfflineQueue`."""

    def __init__(self, queue: ConflictQueue, *, now: Callable[[], float] = time.time) -> None:
        self.queue = queue
        self._store = queue.store  # where the records are kept, in the queue's file
        self._now = now

    # -- snapshots -----------------------------------------------------------------------

    def snapshot(self, entity: str) -> Snapshot | None:
        row = self._store.snapshot(entity)
        if row is None:
            return None
        return Snapshot(entity, row["version"], json.loads(row["data"]))

    def remember(self, entity: str, version: str | None, data: Any) -> None:
        """The server holds ``data`` at ``version``: the base of the next merge."""
        self._store.put_snapshot(entity, version, json.dumps(data), self._now())

    # -- records -------------------------------------------------------------------------

    def get(self, conflict_id: int) -> ConflictRecord:
        row = self._store.conflict(conflict_id)
        if row is None:
            raise NotFound(f"no conflict {conflict_id} in {self.queue.path}")
        return _record(row)

    def records(self, outcome: str | None = None, limit: int = 1000) -> list[ConflictRecord]:
        return [_record(r) for r in self._store.conflicts(outcome, limit)]

    def record(
        self,
        op: Operation,
        outcome: RecordOutcome,
        *,
        strategy: str,
        base: Any = None,
        local: Any = None,
        remote: Any = None,
        remote_version: str | None = None,
        result: Any = None,
        resolution: str | None = None,
        new_op_id: str | None = None,
        detail: str | None = None,
    ) -> int:
        params = {
            "entity": op.entity,
            "op_id": op.id,
            "idempotency_key": op.idempotency_key,
            "op_type": op.type,
            "strategy": strategy,
            "outcome": outcome,
            "base": _dump(base),
            "local": _dump(local),
            "remote": _dump(remote),
            "remote_version": remote_version,
            "result": _dump(result),
            "resolution": resolution,
            "new_op_id": new_op_id,
            "detail": detail,
            "now": self._now(),
        }
        return self._store.add_conflict(params)

    def hold(
        self,
        op: Operation,
        *,
        strategy: str,
        detail: str | None = None,
        base: Any = None,
        local: Any = None,
        remote: Any = None,
        remote_version: str | None = None,
    ) -> int:
        """Record the conflict-held ``op`` as waiting for the user; returns the record's id.
        Once per operation: an open record of it is kept, unless it knew nothing of the
        server's state and this one does (a `reconcile` that ran before the engine recorded
        the reply): then it is closed (resolution ``replaced``) and this one recorded."""
        with self.queue.batch():
            for row in self._store.held_conflicts(op.entity):
                if row["op_id"] != op.id:
                    continue
                if row["remote"] is not None or remote is None:
                    return int(row["id"])
                self.close(row["id"], "replaced")
            return self.record(
                op,
                "held",
                strategy=strategy,
                base=base,
                local=local,
                remote=remote,
                remote_version=remote_version,
                detail=detail,
            )

    def close(self, conflict_id: int, resolution: str) -> None:
        """End a held record without settling anything (its operation is dealt with
        elsewhere): outcome ``resolved``, with ``resolution`` saying how."""
        params = {"id": conflict_id, "resolution": resolution, "result": None, "new_op_id": None}
        self._store.settle_conflict(params | {"now": self._now()})

    def reconcile(self) -> int:
        """Make the held records match the queue: a conflict-held operation without one
        gets one (strategy ``none``; the server's reply was not kept, so its state is
        unknown: ``--keep local`` then sends this device's version unconditionally); a
        held record whose operation is no longer held is closed (resolution ``gone``).
        One transaction. Returns how many records it wrote or closed."""
        changed = 0
        with self.queue.batch():
            held = self.queue.operations(OpStatus.CONFLICT, limit=_ALL)
            records = self.records("held", _ALL)
            live = {op.id for op in held}
            for record in records:
                if record.op_id not in live:
                    self.close(record.id, "gone")
                    changed += 1
            recorded = {record.op_id for record in records}
            for op in held:
                if op.id in recorded:
                    continue
                base, local = self.base_and_local(op.entity)
                self.hold(
                    op,
                    strategy=NO_RESOLVER,
                    base=base,
                    local=local,
                    detail=f"{op.last_error or 'conflict'}; held with no record of the "
                    "server's reply, so its state is unknown",
                )
                changed += 1
        return changed

    # -- settling ------------------------------------------------------------------------

    def base_and_local(self, entity: str) -> tuple[Any, Any]:
        """The entity's last state seen from the server (None if never) and this device's
        state after its live operations on top of it: the base and local of a merge."""
        snap = self.snapshot(entity)
        base = None if snap is None else snap.data
        return base, local_state(self.tail(entity), base)

    def tail(self, entity: str) -> list[Operation]:
        """The entity's live operations, oldest first."""
        return self._store.entity_tail(entity)

    def settle(
        self,
        op: Operation,
        *,
        result: Any,
        remote: Any,
        remote_version: str | None,
        write: bool,
    ) -> Operation | None:
        """Replace the conflicted ``op`` and the operations waiting behind it by ONE new
        operation writing ``result`` (``DELETED`` for a delete) against ``remote_version``,
        or by nothing when ``write`` is False (the server already holds what we want).
        The superseded operations are recorded; returns the new operation, if any. Call
        inside ``queue.batch()`` so that every step commits together."""
        ops = self.tail(op.entity)
        if not ops or ops[0].id != op.id or ops[0].status is not OpStatus.CONFLICT:
            raise InvalidState(f"operation {op.id} is no longer the held head of {op.entity}")
        self.queue.discard(op.id)
        later: list[Operation] = []
        for waiting in ops[1:]:
            try:
                self.queue.cancel(waiting.id)
            except InvalidState:
                break  # sent once already: the server may hold it, so it stays and goes
            later.append(waiting)
        self.queue.set_base_version(op.entity, remote_version)
        self.remember(op.entity, remote_version, remote)
        new = None
        if write:
            type_, method, endpoint = _route(op, delete=result is DELETED)
            payload = {} if result is DELETED else result
            new = self.queue.enqueue(
                type_,
                op.entity,
                payload,
                endpoint=endpoint,
                method=method,
                base_version=remote_version,
            )
        for waiting in later:
            self.record(
                waiting,
                "superseded",
                strategy="fold",
                local=waiting.payload,
                new_op_id=None if new is None else new.id,
                detail=f"folded into the resolution of {op.id}",
            )
        return new

    def resolve(self, conflict_id: int, keep: Keep, merged: Any = None) -> Operation | None:
        """The user's choice for a held conflict. ``local``: send this device's version;
        ``remote``: keep the server's, send nothing; ``both``: keep the server's and save
        this device's as a new entity (the conflicted copy); ``merged``: send ``merged``.
        Returns the new operation (the copy's create for ``both``)."""
        if keep not in KEEPS:
            raise InvalidOperation(f"keep must be one of {', '.join(KEEPS)}, not {keep!r}")
        if keep == "merged" and merged is None:
            raise InvalidOperation("keep='merged' needs the merged value")
        record = self.get(conflict_id)
        if record.outcome != "held":
            raise InvalidState(f"conflict {conflict_id} is {record.outcome}, not held")
        with self.queue.batch():
            ops = self.tail(record.entity)
            held = next((o for o in ops if o.id == record.op_id), None)
            if held is None:
                raise InvalidState(f"the operation of conflict {conflict_id} left the queue")
            snap = self.snapshot(record.entity)
            local = local_state(ops, None if snap is None else snap.data)
            result = {"local": local, "remote": record.remote, "both": local}.get(keep, merged)
            write = keep in ("local", "merged")
            new = self.settle(
                held,
                result=result,
                remote=record.remote,
                remote_version=record.remote_version,
                write=write,
            )
            if keep == "both" and local is not DELETED:
                new = self._copy(held, local, conflict_id)
            self._store.settle_conflict(
                {
                    "id": conflict_id,
                    "resolution": keep,
                    "result": _dump(result),
                    "new_op_id": None if new is None else new.id,
                    "now": self._now(),
                }
            )
        return new

    def _copy(self, held: Operation, local: Any, conflict_id: int) -> Operation:
        kind, _, ident = held.entity.partition(":")
        copy_id = f"{ident or kind}-conflicted-copy-{conflict_id}"
        payload = dict(local) if isinstance(local, dict) else {"value": local}
        payload["id"] = copy_id
        endpoint = held.endpoint
        if endpoint is not None and (held.method or "").upper() != "POST":
            endpoint = endpoint.rstrip("/").rsplit("/", 1)[0]
        return self.queue.enqueue(
            "create",
            f"{kind}:{copy_id}" if ident else copy_id,
            payload,
            endpoint=endpoint,
            method=None if endpoint is None else "POST",
        )

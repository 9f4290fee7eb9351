"""`QueueStore`: what the edge queue and its conflict records need from storage, declared
beside them (DESIGN.md, "Seams"). `pigeon.edge.store.EdgeStore` is the SQLite
implementation.

Declared so far: the conflict records and base snapshots (`pigeon.edge.conflicts` reaches
them through the store, never through a raw transaction), an entity's live tail, the
lookups of the CLI, and ``batch()``, which makes a caller's several calls one transaction.
The queue's own transitions (enqueue, dispatch, delivery, failure) still run on the
SQLite store's transactions inside `OfflineQueue`; they move behind this protocol next.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pigeon.edge.operation import Operation

Record = Mapping[str, Any]  # one stored row, by column name


class QueueStore(Protocol):
    @property
    def path(self) -> str: ...

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Make this thread's calls inside the block one transaction (one fsync)."""
        ...

    def in_batch(self) -> bool: ...

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

"""`EdgeStore`: the `QueueStore` of one SQLite file (`QueueFile`: the database, its locks,
owners and recovery). Each method is one write transaction (or a savepoint of this
thread's ``batch()``), or one read; the moves themselves are in
`pigeon.edge.sqlite.moves` and the enqueue's transaction in `pigeon.edge.sqlite.append`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pigeon.core.clock import HLCTimestamp
from pigeon.core.operation import Operation, OpStatus
from pigeon.edge.queue_store import Built, Delivery, More, NewOp, NextAttempt
from pigeon.edge.sqlite import moves
from pigeon.edge.sqlite.append import append_one, write
from pigeon.edge.sqlite.file import RECOVER_EVERY, QueueFile, init_state
from pigeon.edge.sqlite.rows import to_operation
from pigeon.edge.sqlite.stamps import FileClock
from pigeon.edge.sqlite.stats import collect_stats
from pigeon.edge.stats import QueueStats
from pigeon.exceptions import PigeonError
from pigeon.storage.crypto import PLAIN, Cipher
from pigeon.storage.errors import is_full
from pigeon.storage.sqlite import Durability, Row


def _system_ms() -> int:
    return int(time.time() * 1000)


class EdgeStore(QueueFile):
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability,
        create: bool,
        recover: bool,
        now: float,
        upgrade: bool = True,
        recover_every: float = RECOVER_EVERY,
        cipher: Cipher = PLAIN,
        coalesce: bool = True,
        node_id: str | None = None,
        wall: Callable[[], int] = _system_ms,
    ) -> None:
        """``coalesce``: fold appends into their entity's unsent tail. ``node_id``: the
        node the clock stamps name (default: the file's own). ``wall``: the clock's
        milliseconds (default: the system's)."""
        super().__init__(
            path,
            durability=durability,
            create=create,
            recover=recover,
            now=now,
            upgrade=upgrade,
            recover_every=recover_every,
            cipher=cipher,
        )
        self.coalesce = coalesce
        try:
            with self.write() as tx:
                init_state(tx)
                state = tx.fetchone("get_state")
        except BaseException:
            super().close()
            raise
        assert state is not None
        self._node_id: str = node_id or state["node_id"]
        # No restore: every transaction that stamps starts from the file's clock.
        self.clock = FileClock(self._node_id, wall=wall)
        self._lent = False  # stamp() handed out stamps no transaction recorded

    @property
    def node_id(self) -> str:
        return self._node_id

    def close(self) -> None:
        if self._lent:  # operations' stamps are recorded already; stamp()'s are not
            with contextlib.suppress(PigeonError), self.write() as tx:
                self.clock.observe_floor(tx)
                self.clock.record(tx, self.clock.next())
        super().close()

    # -- appending -----------------------------------------------------------------------

    def append(self, first: Sequence[NewOp], more: More) -> list[Built | BaseException]:
        """Write ``first`` (and what ``more()`` adds while we write) in one transaction
        (`pigeon.edge.sqlite.append.write`). No savepoint per item: an item fails only on
        a broken file or a duplicate id, so the common path does not pay two statements
        per item for the rare one. If an item does fail, the whole batch is written again
        with a savepoint each."""
        items = list(first)
        try:
            if self.in_batch():
                with self.write() as tx:  # a savepoint of this thread's batch()
                    return write(tx, items, more, coalesce=self.coalesce, clock=self.clock)
            # Every enqueue passes here: no generator context managers on this path, and
            # a partial (no frame of its own) rather than a lambda.
            work = functools.partial(
                write, items=items, more=more, coalesce=self.coalesce, clock=self.clock
            )
            return self.db.run_in_transaction(work)
        except Exception:
            if len(items) == 1:
                raise
        return self._append_each(items)

    def _append_each(self, items: Sequence[NewOp]) -> list[Built | BaseException]:
        outcomes: list[Built | BaseException] = []
        saved = 0
        with self.write() as tx:
            # A new transaction: another process may have stamped since the failed one.
            self.clock.observe_floor(tx)
            for new in items:
                new.clock = self.clock.next()
            for new in items:
                try:
                    with tx.savepoint():  # one caller's failure stays its own
                        op, n = append_one(tx, new, coalesce=self.coalesce)
                except Exception as exc:
                    if is_full(exc):  # everyone's failure: the transaction maps it
                        raise
                    outcomes.append(exc)
                    continue
                saved += n
                outcomes.append(op)
            self.clock.record(tx, items[-1].clock, saved)
        return outcomes

    def stamp(self) -> HLCTimestamp:
        self.clock.observe_floor(self.read())
        self._lent = True
        return self.clock.now()

    # -- moves ---------------------------------------------------------------------------

    def dispatch(self, n: int, now: float) -> list[Operation]:
        # Durable, although IN_FLIGHT itself is volatile (recovery resets it): the same
        # write counts the dispatch, and that count is what forbids folding into or
        # cancelling an operation the server may hold.
        with self.write() as tx:
            state = tx.fetchone("get_state")
            if state is not None and state["paused"] is not None:
                return []
            # From time to time, first take over what queues that died left in flight, in
            # this same transaction: it is due now and leaves in this very batch, our token
            # on it. Only here, never on enqueue: one check serves every sender.
            if self._owners.due():
                self.recover_owners(tx, now)
            return moves.dispatch(tx, n, now, self._owners.token)

    def deliver(self, op_id: str, response: Any, now: float) -> None:
        # No savepoint needed inside batch(): nothing is written unless it is deliverable.
        # There (a sender settling a reply) the batch's own transaction, without a context
        # manager: this runs once per operation delivered.
        tx = self.batch_tx()
        if tx is not None:
            moves.deliver(tx, self.path, op_id, response, now)
            return
        with self.write() as tx:
            moves.deliver(tx, self.path, op_id, response, now)

    def deliver_many(self, items: Sequence[Delivery], now: float) -> None:
        with self.write() as tx:
            moves.deliver_many(tx, self.path, items, now)

    def fail(
        self, op_id: str, *, error: str, kind: str, now: float, then: NextAttempt
    ) -> Operation:
        with self.write() as tx:
            return moves.fail(tx, self.path, op_id, error=error, kind=kind, now=now, then=then)

    def release(self, op_id: str, *, due: float, sent: bool) -> Operation:
        with self.write() as tx:
            return moves.release(tx, self.path, op_id, due=due, sent=sent)

    def resurrect(self, op_id: str, now: float) -> Operation:
        with self.write() as tx:
            return moves.resurrect(tx, self.path, op_id, now)

    def remove(
        self, op_id: str, *, allowed: Sequence[OpStatus], action: str, tail: bool = False
    ) -> list[Operation]:
        with self.write() as tx:
            return moves.remove(tx, self.path, op_id, allowed=allowed, action=action, tail=tail)

    def unhold(self, op_id: str, now: float) -> None:
        with self.write() as tx:
            moves.unhold(tx, self.path, op_id, now)

    def purge_delivered(self, before: float, limit: int) -> int:
        # Their stamps may be the greatest issued; the state row's clock, which every
        # stamping transaction raises, already holds one at least as great.
        with self.write() as tx:
            return int(tx.execute("purge_delivered", {"before": before, "limit": limit}).rowcount)

    def set_paused(self, reason: str | None) -> None:
        with self.write() as tx:
            tx.execute("set_paused", {"paused": reason})

    def set_base_version(self, entity: str, version: str | None) -> None:
        with self.write() as tx:
            if version is None:
                tx.execute("clear_base_version", {"entity": entity})
            else:
                tx.execute("set_base_version", {"entity": entity, "version": version})

    # -- reading -------------------------------------------------------------------------

    def _ops(self, rows: Sequence[Row]) -> list[Operation]:
        """Rows of the operations table as Operations, their sealed columns opened."""
        return [to_operation(r, self.cipher) for r in rows]

    def get(self, op_id: str) -> Operation:
        return to_operation(moves.row(self.read(), self.path, op_id), self.cipher)

    def live(self) -> list[Operation]:
        return self._ops(self.read().fetchall("pending_ops"))

    def dead(self) -> list[Operation]:
        return self._ops(self.read().fetchall("dead_ops"))

    def listing(self, status: str | None, limit: int) -> list[Operation]:
        return self._ops(self.read().fetchall("list_ops", {"status": status, "n": limit}))

    def stats(self, now: float) -> QueueStats:
        with self.write() as tx:  # one snapshot for every count
            return collect_stats(tx, now)

    def next_due_at(self) -> float | None:
        tx = self.read()
        fresh = tx.fetchone("first_fresh")
        backoff = tx.fetchone("next_backoff")
        times = [r["at"] for r in (fresh, backoff) if r is not None and r["at"] is not None]
        return min(times) if times else None

    @property
    def paused(self) -> str | None:
        state = self.read().fetchone("get_state")
        return None if state is None else state["paused"]

    def base_version(self, entity: str) -> str | None:
        row = self.read().fetchone("get_base_version", {"entity": entity})
        return None if row is None else str(row["version"])

    def entity_tail(self, entity: str) -> list[Operation]:
        with self.write() as tx:
            return self._ops(tx.fetchall("entity_tail", {"entity": entity}))

    def op_id_by_seq(self, seq: int) -> str | None:
        """The id of the operation with this seq (the short handle `pigeon queue` shows)."""
        row = self.read().fetchone("op_id_by_seq", {"seq": seq})
        return None if row is None else str(row["id"])

    # -- conflict records and base snapshots (pigeon.edge.conflicts) ---------------------
    # Each in a write transaction of its own, or a savepoint of this thread's batch().

    def snapshot(self, entity: str) -> Row | None:
        with self.write() as tx:
            return tx.fetchone("snapshot_get", {"entity": entity})

    def put_snapshot(self, entity: str, version: str | None, data: str, now: float) -> None:
        with self.write() as tx:
            params = {"entity": entity, "version": version, "data": data, "now": now}
            tx.execute("snapshot_put", params)

    def conflict(self, conflict_id: int) -> Row | None:
        with self.write() as tx:
            return tx.fetchone("conflict_get", {"id": conflict_id})

    def conflicts(self, outcome: str | None, limit: int) -> list[Row]:
        with self.write() as tx:
            return tx.fetchall("conflict_list", {"outcome": outcome, "n": limit})

    def held_conflicts(self, entity: str) -> list[Row]:
        with self.write() as tx:
            return tx.fetchall("conflict_held_for", {"entity": entity})

    def add_conflict(self, record: Mapping[str, Any]) -> int:
        """Insert a conflict record (the columns of ``conflict_insert``); its id."""
        with self.write() as tx:
            cursor = tx.execute("conflict_insert", record)
        assert cursor.lastrowid is not None
        return int(cursor.lastrowid)

    def settle_conflict(self, settled: Mapping[str, Any]) -> None:
        """End a held record: ``id``, ``resolution``, ``result``, ``new_op_id``, ``now``."""
        with self.write() as tx:
            tx.execute("conflict_resolve", settled)

"""The queue's storage: one SQLite file, its named queries, and the row-level rules.

Everything here runs inside a write transaction handed in by the caller (``write()``), so
an operation and its effects on the entity's head, the coalescing counter and the clock
are committed together or not at all. The invariant kept by every write: on each entity,
exactly the earliest live (pending / in flight / conflict-held) operation has ``head = 1``,
and only heads are ever handed to a sender.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from pigeon.edge import owners
from pigeon.edge.append import Built as Built
from pigeon.edge.append import NewOp as NewOp
from pigeon.edge.append import append, stamp, write_all
from pigeon.edge.ids import uuid4
from pigeon.edge.operation import Operation, OpStatus
from pigeon.edge.rows import operations, response_text
from pigeon.edge.rows import require as require
from pigeon.edge.rows import to_operation as to_operation
from pigeon.edge.rows import was_sent as was_sent
from pigeon.edge.stamps import FileClock
from pigeon.exceptions import NotFound
from pigeon.storage.crypto import PLAIN, Cipher
from pigeon.storage.queries import load_queries
from pigeon.storage.sqlite import Durability, Row, SQLiteDatabase, SQLiteTx, is_full

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, recover on every open
    fcntl = None  # type: ignore[assignment]

APPLICATION_ID = 0x50474E45  # "PGNE": a pigeon edge queue file
LIVE = (OpStatus.PENDING, OpStatus.IN_FLIGHT, OpStatus.CONFLICT)
HISTORY_LIMIT = 100  # failed attempts remembered per operation
RECOVER_EVERY = owners.CHECK_EVERY  # seconds between next_batch's looks for dead owners
# New queue files only (an existing file keeps its size). An enqueue rewrites four pages
# (the row and three index leaves) and every one goes to the WAL whole: 2 KiB pages halve
# what each commit writes, while rows (~0.5 KiB) still fit several to a page. Measured on
# the enqueue benchmark against 1, 4 and 8 KiB; 2 KiB came out fastest.
PAGE_SIZE = 2048


def _open_lock(path: str) -> int | None:
    """The side file whose advisory lock says whether any other queue has the file open;
    None where there is no flock, or in a read-only directory (then nobody can tell, and
    an opener that recovers does so). Which queue holds an in-flight operation, and
    whether it is still alive, is told by its owner file instead (pigeon.edge.owners);
    this lock still decides for rows with no owner (written before there were owners)."""
    if fcntl is not None:
        with contextlib.suppress(OSError):
            return os.open(path + "-lock", os.O_RDWR | os.O_CREAT, 0o600)
    return None


class _ThisThread(threading.local):
    """This thread's ``batch()`` transaction. A class default, not ``getattr(local, "tx",
    None)``: a missing attribute of a ``threading.local`` raises and catches inside, ~0.5 µs
    twice per enqueue (hot path)."""

    tx: SQLiteTx | None = None


def init_state(tx: SQLiteTx) -> None:
    """Give a new file its state row, with a random node id for its clock (a no-op on a
    file that has one): by whichever of the store and the queue writes first."""
    tx.execute("init_state", {"node_id": uuid4().split("-")[0]})


class EdgeStore:
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
    ) -> None:
        self.path = os.fspath(path)
        self.cipher = cipher
        every = owners.check_every(recover_every)  # refused before anything is opened
        self.db = SQLiteDatabase(
            path,
            application_id=APPLICATION_ID,
            components=("edge",),
            # The queue's own and its conflict records' (pigeon.edge.conflicts): one set.
            queries=load_queries("sqlite", "edge") | load_queries("sqlite", "edge_conflicts"),
            durability=durability,
            create=create,
            # Savepoints (group commit, batch()) journal the pages they touch; in memory,
            # not in a temporary file, or every enqueue pays for file writes.
            pragmas={"temp_store": "MEMORY", "cache_size": -16384},
            page_size=PAGE_SIZE,
            upgrade=upgrade,
            cipher=cipher,
        )
        self._local = _ThisThread()
        # Every open queue holds this side file's advisory lock shared, recovering or not
        # (the CLI opens without recovering): a process that recovers must see them all.
        self._lock_fd = _open_lock(self.path)
        try:
            # Before recovering: a neighbour's check must already see us alive when our
            # first in-flight row appears, and our own sweep must know which file is ours.
            self._owners = owners.Owners(self.path, issue=self._issue, every=every, recover=recover)
        except BaseException:
            self.db.close()
            self._close_lock()
            raise
        try:
            if recover:
                self._recover(now)
            elif self._lock_fd is not None:
                fcntl.flock(self._lock_fd, fcntl.LOCK_SH)
        except BaseException:
            self.close()
            raise

    def _issue(self, floor: int) -> int:
        """The file's next owner token above ``floor``, committed (pigeon.edge.owners). A
        new file gets its state row here (as OfflineQueue's init_state would make it:
        that one then finds it), since a token is issued before anything else is written."""
        with self.write() as tx:
            init_state(tx)
            row = tx.fetchone("issue_owner", {"floor": floor})
        assert row is not None
        number: int = row["owners_issued"]
        return number

    def _recover(self, now: float) -> None:
        """Put back to pending the in-flight operations of queues that are gone. Whoever
        can take the side lock exclusively is alone and puts back all of them (also those
        with no owner), then keeps it shared like everyone else. Otherwise only those of
        owners found dead (pigeon.edge.owners): a live queue's, in this process or
        another, are really in flight."""
        sole = True
        if self._lock_fd is not None:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                sole = False
        with self.write() as tx:
            if sole:
                tx.execute("recover_in_flight", {"now": now})
            else:
                self._owners.recover(tx, now)
        self._owners.sweep()  # files of the dead with nothing in flight
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_SH)

    @contextlib.contextmanager
    def write(self, *, savepoint: bool = True) -> Iterator[SQLiteTx]:
        """A write transaction; inside ``batch()`` on this thread, a savepoint of it."""
        outer: SQLiteTx | None = self._local.tx
        if outer is not None:
            if not savepoint:
                yield outer
                return
            with outer.savepoint():
                yield outer
            return
        with self.db.transaction() as tx:
            yield tx

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Make every write of this thread inside the block one transaction (one fsync)."""
        if self._local.tx is not None:
            yield
            return
        with self.db.transaction() as tx:
            self._local.tx = tx
            try:
                yield
            finally:
                self._local.tx = None

    def in_batch(self) -> bool:
        return self._local.tx is not None

    def batch_tx(self) -> SQLiteTx | None:
        """The transaction of this thread's ``batch()``, if one is open."""
        tx: SQLiteTx | None = self._local.tx
        return tx

    def read(self) -> SQLiteTx:
        return self.db.read()

    def close(self) -> None:
        self.db.close()
        self._owners.close()  # after the file: nothing of ours goes in flight any more
        self._close_lock()

    def _close_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- inside a write transaction ------------------------------------------------------

    def append_all(
        self,
        first: Sequence[NewOp],
        more: Callable[[], Sequence[NewOp]],
        *,
        coalesce: bool,
        clock: FileClock,
    ) -> list[Built | BaseException]:
        """Write ``first`` (and what ``more()`` adds while we write) in one transaction,
        stamped by ``clock`` in it. No savepoint per item: an item fails only on a broken
        file or a duplicate id, so the common path does not pay two statements per item
        for the rare one. If an item does fail, the whole batch is written again with a
        savepoint each."""
        items = list(first)
        try:
            if self.in_batch():
                with self.write() as tx:  # a savepoint of this thread's batch()
                    return write_all(tx, items, more, coalesce=coalesce, clock=clock)
            # Every enqueue passes here: no generator context managers on this path.
            return self.db.run_in_transaction(
                lambda tx: write_all(tx, items, more, coalesce=coalesce, clock=clock)
            )
        except Exception:
            if len(items) == 1:
                raise
        return self._append_each(items, coalesce=coalesce, clock=clock)

    def _append_each(
        self, items: Sequence[NewOp], *, coalesce: bool, clock: FileClock
    ) -> list[Built | BaseException]:
        outcomes: list[Built | BaseException] = []
        saved = 0
        with self.write() as tx:
            # A new transaction: another process may have stamped since the failed one.
            clock.observe_floor(tx)
            stamp(items, clock)
            for new in items:
                try:
                    with tx.savepoint():  # one caller's failure stays its own
                        op, n = append(tx, new, coalesce=coalesce)
                except Exception as exc:
                    if is_full(exc):  # everyone's failure: the transaction maps it
                        raise
                    outcomes.append(exc)
                    continue
                saved += n
                outcomes.append(op)
            clock.record(tx, items[-1].clock, saved)
        return outcomes

    def row(self, tx: SQLiteTx, op_id: str) -> Row:
        row = tx.fetchone("get_op", {"id": op_id})
        if row is None:
            raise NotFound(f"no operation {op_id!r} in {self.path}")
        return row

    def ops(self, rows: Sequence[Row]) -> list[Operation]:
        """Rows of the operations table as Operations, their sealed columns opened."""
        return [to_operation(r, self.cipher) for r in rows]

    def dispatch(self, tx: SQLiteTx, n: int, now: float) -> list[Operation]:
        # From time to time, first take over what queues that died left in flight, in
        # this same transaction: it is due now and leaves in this very batch, our token on
        # it. Only here, never on enqueue: one check serves every sender of this queue.
        if self._owners.due():
            self._owners.recover(tx, now)
        params = {"now": now, "n": n, "owner": self._owners.token}
        # Tuples: rows.operations() reads them by position.
        cursor = tx.tuples("dispatch_due", params)
        return sorted(operations(cursor, tx.cipher), key=lambda op: op.seq)

    def deliver(self, tx: SQLiteTx, op_id: str, response: Any, now: float) -> None:
        text = response_text(response, op_id, tx.cipher)
        done = tx.fetchone("deliver", {"id": op_id, "now": now, "response": text})
        if done is None:  # not deliverable: say why (or nothing, if already delivered)
            row = self.row(tx, op_id)
            if row["status"] != OpStatus.DELIVERED:
                require(row, OpStatus.IN_FLIGHT, action="mark delivered")
            return
        if done["promote"] is not None:  # what promote_head would do, found by deliver
            tx.execute("set_head", {"seq": done["promote"]})

    def deliver_many(
        self, tx: SQLiteTx, items: Sequence[tuple[str, Any, str | None]], now: float
    ) -> None:
        """``deliver`` for a whole reply: three statements (four with versions) however
        many operations, instead of two or three each. An entry not deliverable (and not
        already delivered) raises before anything is written. As one call per entry would:
        an id given twice counts once, with its first response and etag, and an etag
        becomes its entity's base version only if this call delivered the operation — a
        late repeat of an old reply must not put back a version the entity has left."""
        first: dict[str, tuple[Any, str | None]] = {}
        for op_id, response, etag in items:
            first.setdefault(op_id, (response, etag))
        ids = json.dumps(list(first))
        rows = {r["id"]: r for r in tx.fetchall("delivery_states", {"ids": ids})}
        moved: list[str] = []
        for op_id in first:
            row = rows.get(op_id)
            if row is None:
                raise NotFound(f"no operation {op_id!r} in {self.path}")
            # What deliver_all's WHERE accepts: in flight, or pending once sent.
            status = row["status"]
            if status == OpStatus.IN_FLIGHT or (status == OpStatus.PENDING and row["dispatches"]):
                moved.append(op_id)
            elif status != OpStatus.DELIVERED:
                require(row, OpStatus.IN_FLIGHT, action="mark delivered")
        if not moved:  # all of it delivered before: a repeat changes nothing
            return
        tx.execute(
            "deliver_all",
            {
                "items": json.dumps([[i, response_text(first[i][0], i, tx.cipher)] for i in moved]),
                "now": now,
            },
        )
        versions: list[Mapping[str, Any]] = [
            {"entity": rows[i]["entity"], "version": first[i][1]}
            for i in moved
            if first[i][1] is not None
        ]
        if versions:
            tx.executemany("set_base_version", versions)
        entities = dict.fromkeys(rows[i]["entity"] for i in moved)
        tx.execute("promote_heads", {"entities": json.dumps(list(entities))})

    def fail(
        self,
        tx: SQLiteTx,
        row: Row,
        *,
        status: OpStatus,
        error: str,
        kind: str,
        now: float,
        next_attempt_at: float | None = None,
    ) -> Operation:
        attempts = row["attempts"] + 1
        history = json.loads(row["history"])
        history.append({"at": now, "attempt": attempts, "kind": kind, "error": error})
        params = {
            "seq": row["seq"],
            "attempts": attempts,
            "last_error": error,
            "history": json.dumps(history[-HISTORY_LIMIT:]),
            "next_attempt_at": next_attempt_at if next_attempt_at is not None else now,
        }
        if status is OpStatus.DEAD:
            tx.execute("bury", params)
            tx.execute("promote_head", {"entity": row["entity"]})
        elif status is OpStatus.CONFLICT:
            tx.execute("hold_conflict", params)
        else:
            tx.execute("reschedule", params)
        return to_operation(self.row(tx, row["id"]), tx.cipher)

    def remove(self, tx: SQLiteTx, row: Row) -> None:
        tx.execute("delete_op", {"seq": row["seq"]})
        tx.execute("promote_head", {"entity": row["entity"]})

    def resurrect(self, tx: SQLiteTx, row: Row, now: float) -> Operation:
        alone = tx.fetchone("live_tail", {"entity": row["entity"]}) is None
        tx.execute("resurrect", {"seq": row["seq"], "now": now, "head": int(alone)})
        return to_operation(self.row(tx, row["id"]), tx.cipher)

    # -- conflict records and base snapshots (pigeon.edge.conflicts) ---------------------
    # Each in a write transaction of its own, or a savepoint of this thread's batch().

    def snapshot(self, entity: str) -> Row | None:
        """The entity's last state seen from the server: ``version`` and ``data`` (JSON)."""
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

    def entity_tail(self, entity: str) -> list[Operation]:
        """The entity's live operations, oldest first."""
        with self.write() as tx:
            rows = tx.fetchall("entity_tail", {"entity": entity})
            return [to_operation(r, tx.cipher) for r in rows]

    def op_id_by_seq(self, seq: int) -> str | None:
        """The id of the operation with this seq (the short handle `pigeon queue` shows)."""
        row = self.read().fetchone("op_id_by_seq", {"seq": seq})
        return None if row is None else str(row["id"])

"""The queue's storage: one SQLite file, its named queries, and the row-level rules.

Everything here runs inside a write transaction handed in by the caller (``write()``), so
an operation and its effects on the entity's head, the coalescing counter and the clock
are committed together or not at all. The invariant kept by every write: on each entity,
exactly the earliest live (pending / in flight / conflict-held) operation has ``head = 1``,
and only heads are ever handed to a sender.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pigeon.edge.coalesce import Fold, Step, decide
from pigeon.edge.operation import Operation, OpStatus
from pigeon.exceptions import InvalidState, NotFound
from pigeon.storage.queries import load_queries
from pigeon.storage.sqlite import Durability, Row, SQLiteDatabase, SQLiteTx

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, recover on every open
    fcntl = None  # type: ignore[assignment]

APPLICATION_ID = 0x50474E45  # "PGNE": a pigeon edge queue file
LIVE = (OpStatus.PENDING, OpStatus.IN_FLIGHT, OpStatus.CONFLICT)
HISTORY_LIMIT = 100  # failed attempts remembered per operation
# New queue files only (an existing file keeps its size). An enqueue rewrites four pages
# (the row and three index leaves) and every one goes to the WAL whole: 2 KiB pages halve
# what each commit writes, while rows (~0.5 KiB) still fit several to a page. Measured on
# the enqueue benchmark against 1, 4 and 8 KiB; 2 KiB came out fastest.
PAGE_SIZE = 2048


Built = Callable[[], Operation]


@dataclass(slots=True)  # not frozen: a frozen __init__ costs a setattr call per field
class NewOp:
    """A validated operation on its way into the file (never changed once made)."""

    id: str
    idempotency_key: str
    type: str
    entity: str
    payload: str  # JSON text
    endpoint: str | None
    method: str | None
    created_at: float
    clock: str
    base_version: str | None


def to_operation(row: Row) -> Operation:
    return Operation(
        id=row["id"],
        type=row["type"],
        entity=row["entity"],
        payload=json.loads(row["payload"]),
        idempotency_key=row["idempotency_key"],
        endpoint=row["endpoint"],
        method=row["method"],
        created_at=row["created_at"],
        clock=row["clock"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        last_error=row["last_error"],
        base_version=row["base_version"],
        status=OpStatus(row["status"]),
        seq=row["seq"],
        history=json.loads(row["history"]),
        delivered_at=row["delivered_at"],
        response=None if row["response"] is None else json.loads(row["response"]),
    )


def was_sent(row: Row) -> bool:
    """Handed to a sender at some point: the server may hold it, so it is never rewritten."""
    return bool(row["status"] != OpStatus.PENDING or row["attempts"] or row["dispatches"])


class EdgeStore:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability,
        create: bool,
        recover: bool,
        now: float,
    ) -> None:
        self.path = os.fspath(path)
        self.db = SQLiteDatabase(
            path,
            application_id=APPLICATION_ID,
            components=("edge",),
            queries=load_queries("sqlite", "edge"),
            durability=durability,
            create=create,
            # Savepoints (group commit, batch()) journal the pages they touch; in memory,
            # not in a temporary file, or every enqueue pays for file writes.
            pragmas={"temp_store": "MEMORY", "cache_size": -16384},
            page_size=PAGE_SIZE,
        )
        # One writer per process at a time: SQLite would serialise us anyway, but its busy
        # handler sleeps in steps of milliseconds; a lock hands over at once. The
        # database's own lock, so our transactions and its transaction() exclude each other.
        self._writer = self.db.writer
        self._local = threading.local()
        self._lock_fd: int | None = None
        self._insert_heads_sql: dict[int, str] = {}  # insert_heads for n rows, by n
        if recover:
            self._recover(now)

    def _recover(self, now: float) -> None:
        """Put in-flight operations back to pending, unless another live process has the
        file open (its in-flight operations are really in flight). An advisory lock on a
        side file tells: every open queue holds it shared; whoever can take it exclusively
        is alone and recovers, then keeps it shared like everyone else."""
        sole = True
        if fcntl is not None:
            try:
                self._lock_fd = os.open(self.path + "-lock", os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                self._lock_fd = None  # read-only directory: we cannot tell, so recover
            if self._lock_fd is not None:
                try:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    sole = False
        if sole:
            with self.write() as tx:
                tx.execute("recover_in_flight", {"now": now})
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_SH)

    @contextlib.contextmanager
    def write(self, *, savepoint: bool = True) -> Iterator[SQLiteTx]:
        """A write transaction; inside ``batch()`` on this thread, a savepoint of it."""
        outer: SQLiteTx | None = getattr(self._local, "tx", None)
        if outer is not None:
            if not savepoint:
                yield outer
                return
            with outer.savepoint():
                yield outer
            return
        with self._writer, self.db.transaction() as tx:
            yield tx

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Make every write of this thread inside the block one transaction (one fsync)."""
        if getattr(self._local, "tx", None) is not None:
            yield
            return
        with self._writer, self.db.transaction() as tx:
            self._local.tx = tx
            try:
                yield
            finally:
                self._local.tx = None

    def in_batch(self) -> bool:
        return getattr(self._local, "tx", None) is not None

    def read(self) -> SQLiteTx:
        return self.db.read()

    def close(self) -> None:
        self.db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- inside a write transaction ------------------------------------------------------

    def append(self, tx: SQLiteTx, new: NewOp, *, coalesce: bool) -> tuple[Built, int]:
        """Store ``new`` (folded into its entity's tail if allowed). Returns what builds the
        operation as stored (called after the commit, outside the writer's lock) and how
        many sends coalescing saved."""
        tail = tx.fetchone("live_tail", {"entity": new.entity})
        if coalesce and tail is not None:
            incoming = Step(new.type, new.entity, new.payload, new.endpoint, new.method)
            last = Step(
                tail["type"],
                tail["entity"],
                tail["payload"],
                tail["endpoint"],
                tail["method"],
                sent=was_sent(tail),
            )
            decision = decide(last, incoming)
            if decision.fold is Fold.REPLACE:
                assert decision.step is not None
                step = decision.step
                params = {
                    "seq": tail["seq"],
                    "type": step.type,
                    "payload": step.payload,
                    "endpoint": step.endpoint,
                    "method": step.method,
                    "clock": new.clock,
                }
                tx.execute("fold_op", params)
                return functools.partial(to_operation, {**tail, **params}), 1
            if decision.fold is Fold.DROP:
                tx.execute("delete_op", {"seq": tail["seq"]})
                return functools.partial(_from_new, new, seq=0, status=OpStatus.COALESCED), 2
        params = {
            "id": new.id,
            "idempotency_key": new.idempotency_key,
            "type": new.type,
            "entity": new.entity,
            "endpoint": new.endpoint,
            "method": new.method,
            "payload": new.payload,
            "created_at": new.created_at,
            "clock": new.clock,
            "base_version": new.base_version,
            "head": 1 if tail is None else 0,
        }
        seq = tx.execute("insert_op", params).lastrowid
        assert seq is not None
        return functools.partial(_from_new, new, seq=seq, status=OpStatus.PENDING), 0

    def append_all(
        self, first: Sequence[NewOp], more: Callable[[], Sequence[NewOp]], *, coalesce: bool
    ) -> list[Built | BaseException]:
        """Write ``first`` (and what ``more()`` adds while we write) in one transaction.
        No savepoint per item: an item fails only on a broken file or a duplicate id, so
        the common path does not pay two statements per item for the rare one. If an
        item does fail, the whole batch is written again with a savepoint each."""
        items = list(first)
        try:
            if self.in_batch():
                with self.write() as tx:  # a savepoint of this thread's batch()
                    return self._write_all(tx, items, more, coalesce=coalesce)
            # Every enqueue passes here: BEGIN / COMMIT by hand, not through two nested
            # generator context managers (write() and transaction()), which cost more
            # Python than the INSERT itself.
            conn = self.db.connection()
            tx = SQLiteTx(conn, self.db.queries)
            with self._writer:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    built = self._write_all(tx, items, more, coalesce=coalesce)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:  # a failed COMMIT included: nothing half-kept
                        conn.execute("ROLLBACK")
                    raise
            return built
        except Exception:
            if len(items) == 1:
                raise
        return self._append_each(items, coalesce=coalesce)

    def _write_all(
        self,
        tx: SQLiteTx,
        items: list[NewOp],
        more: Callable[[], Sequence[NewOp]],
        *,
        coalesce: bool,
    ) -> list[Built | BaseException]:
        """``items`` and any late joiners into the open transaction ``tx`` (extends
        ``items`` with the latter)."""
        built: list[Built | BaseException] = []
        saved = 0
        while True:
            run = items[len(built) :]
            if len(run) == 1:
                op, n = self.append(tx, run[0], coalesce=coalesce)
                built.append(op)
                saved += n
            else:
                saved += self._append_run(tx, run, built, coalesce=coalesce)
            extra = more()
            if not extra:
                break
            items.extend(extra)
        _bump_state(tx, items, saved)
        return built

    def _append_run(
        self, tx: SQLiteTx, run: Sequence[NewOp], built: list[Built | BaseException], *,
        coalesce: bool,
    ) -> int:  # fmt: skip
        """Several operations (a group commit's batch) in a few statements instead of two
        each: one query finds which of their entities have live operations, and the rest
        (new entities, each once in the run) go in with one multi-row INSERT as heads.
        Why it pays: every statement hands the interpreter lock to the threads preparing
        the next batch and must wait to get it back, so under contention the leader's
        statement count, not their work, sets the pace. An operation whose entity has a
        live operation, or appeared earlier in the run, goes through ``append()`` in its
        turn, after the rows before it are written, so seq still follows queue order and
        coalescing sees exactly what it would see one enqueue at a time. Appends to
        ``built``; returns how many sends coalescing saved."""
        names = json.dumps(list({new.entity: None for new in run}))
        busy = {r["entity"] for r in tx.fetchall("live_entities", {"entities": names})}
        seen: set[str] = set()
        heads: list[NewOp] = []
        saved = 0
        for new in run:
            if new.entity in busy or new.entity in seen:
                self._insert_heads(tx, heads, built)
                heads = []
                op, n = self.append(tx, new, coalesce=coalesce)
                built.append(op)
                saved += n
            else:
                heads.append(new)
            seen.add(new.entity)
        self._insert_heads(tx, heads, built)
        return saved

    def _insert_heads(
        self, tx: SQLiteTx, heads: Sequence[NewOp], built: list[Built | BaseException]
    ) -> None:
        if not heads:
            return
        sql = self._insert_heads_sql.get(len(heads))
        if sql is None:
            statement, _, row = tx.queries["insert_heads"].rpartition("\n")
            sql = statement + "\n" + ",\n".join([row] * len(heads))
            self._insert_heads_sql[len(heads)] = sql
        values: list[object] = []
        for new in heads:
            values += (
                new.id, new.idempotency_key, new.type, new.entity, new.endpoint, new.method,
                new.payload, new.created_at, new.clock, new.created_at, new.base_version,
            )  # fmt: skip
        last = tx.conn.execute(sql, values).lastrowid
        assert last is not None
        # One statement, under the write lock: SQLite gives each row the greatest rowid so
        # far plus one, so the rows hold consecutive seqs ending at the last one.
        first = last - len(heads) + 1
        built.extend(
            functools.partial(_from_new, new, seq=first + i, status=OpStatus.PENDING)
            for i, new in enumerate(heads)
        )

    def _append_each(
        self, items: Sequence[NewOp], *, coalesce: bool
    ) -> list[Built | BaseException]:
        outcomes: list[Built | BaseException] = []
        saved = 0
        with self.write() as tx:
            for new in items:
                try:
                    with tx.savepoint():  # one caller's failure stays its own
                        op, n = self.append(tx, new, coalesce=coalesce)
                except Exception as exc:
                    outcomes.append(exc)
                    continue
                saved += n
                outcomes.append(op)
            _bump_state(tx, items, saved)
        return outcomes

    def row(self, tx: SQLiteTx, op_id: str) -> Row:
        row = tx.fetchone("get_op", {"id": op_id})
        if row is None:
            raise NotFound(f"no operation {op_id!r} in {self.path}")
        return row

    def dispatch(self, tx: SQLiteTx, n: int, now: float) -> list[Operation]:
        seqs = [r["seq"] for r in tx.fetchall("due_heads", {"now": now, "n": n})]
        if not seqs:
            return []
        rows = tx.fetchall("dispatch", {"seqs": json.dumps(seqs)})
        return sorted((to_operation(r) for r in rows), key=lambda op: op.seq)

    def deliver(self, tx: SQLiteTx, op_id: str, response: Any, now: float) -> None:
        text = _response_text(response)
        done = tx.fetchone("deliver", {"id": op_id, "now": now, "response": text})
        if done is None:  # not deliverable: say why (or nothing, if already delivered)
            row = self.row(tx, op_id)
            if row["status"] != OpStatus.DELIVERED:
                require(row, OpStatus.IN_FLIGHT, action="mark delivered")
            return
        tx.execute("promote_head", {"entity": done["entity"]})

    def deliver_many(
        self, tx: SQLiteTx, items: Sequence[tuple[str, Any, str | None]], now: float
    ) -> None:
        """``deliver`` for a whole reply: one executemany per table instead of two or three
        statements per operation. An entry not deliverable (and not already delivered)
        raises, leaving the caller's transaction or savepoint to undo the rest."""
        tx.executemany(
            "deliver_each",
            [
                {"id": op_id, "now": now, "response": _response_text(response)}
                for op_id, response, _ in items
            ],
        )
        rows = {
            r["id"]: r
            for r in tx.fetchall("ops_by_ids", {"ids": json.dumps([i[0] for i in items])})
        }
        for op_id, _, _ in items:
            row = rows.get(op_id)
            if row is None:
                raise NotFound(f"no operation {op_id!r} in {self.path}")
            if row["status"] != OpStatus.DELIVERED:
                require(row, OpStatus.IN_FLIGHT, action="mark delivered")
        versions: list[Mapping[str, Any]] = [
            {"entity": rows[op_id]["entity"], "version": etag}
            for op_id, _, etag in items
            if etag is not None
        ]
        if versions:
            tx.executemany("set_base_version", versions)
        entities = dict.fromkeys(rows[op_id]["entity"] for op_id, _, _ in items)
        tx.executemany("promote_head", [{"entity": e} for e in entities])

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
        return to_operation(self.row(tx, row["id"]))

    def remove(self, tx: SQLiteTx, row: Row) -> None:
        tx.execute("delete_op", {"seq": row["seq"]})
        tx.execute("promote_head", {"entity": row["entity"]})

    def resurrect(self, tx: SQLiteTx, row: Row, now: float) -> Operation:
        alone = tx.fetchone("live_tail", {"entity": row["entity"]}) is None
        tx.execute("resurrect", {"seq": row["seq"], "now": now, "head": int(alone)})
        return to_operation(self.row(tx, row["id"]))


def _response_text(response: Any) -> str | None:
    return None if response is None else json.dumps(response, default=str)


def _bump_state(tx: SQLiteTx, items: Sequence[NewOp], saved: int) -> None:
    if saved:
        # Only folds need the state row: it keeps the coalescing count, and the clock a
        # folded operation got without a new row (see OfflineQueue._restore_clock).
        tx.execute("bump_state", {"clock": items[-1].clock, "coalesced": saved})


def require(row: Row, *allowed: OpStatus, action: str) -> None:
    if row["status"] not in allowed:
        wanted = " or ".join(s.value for s in allowed)
        raise InvalidState(
            f"cannot {action} operation {row['id']}: it is {row['status']}, not {wanted}"
        )


def _from_new(new: NewOp, *, seq: int, status: OpStatus) -> Operation:
    return Operation(
        id=new.id,
        type=new.type,
        entity=new.entity,
        payload=json.loads(new.payload),
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

"""A transaction of pigeon's own on a pooled PostgreSQL connection, in few round trips.

psycopg sends BEGIN alone and waits for it, and a savepoint's SAVEPOINT and RELEASE each
on their own: four round trips that carry no answer anyone reads. Here the connection is
in autocommit mode for the transaction's length and pigeon says BEGIN, SAVEPOINT, RELEASE
and COMMIT itself: each waits in a queue and travels with the next statement, in one
round trip (psycopg's pipeline mode: the queue and the statement, then one Sync). The
statement's own error is raised where it is run, as without the queue. A savepoint
nothing ran in costs nothing; one rolled back before it was sent is forgotten.

``finish_with`` queues a statement to travel with the COMMIT: the transaction's last, whose
failure makes PostgreSQL skip the COMMIT behind it (what follows an error is not run up to
the Sync). That failure is raised as the exception the caller named. ``defer`` queues one
whose result nobody reads, to travel with whatever is sent next.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from pigeon.exceptions import JobTimeout
from pigeon.storage import deadline
from pigeon.storage.base import NamedStatements, Params
from pigeon.storage.crypto import PLAIN, Cipher

Row = dict[str, Any]
Connection = psycopg.Connection[Row]
# The transaction's statements stop by the thread's deadline on the server too: a client
# that gives up closes its connection, which a backend waiting for a lock never notices,
# so it went on waiting (and holding what it had locked) after the job had timed out.
_STATEMENT_TIMEOUT = "SELECT set_config('statement_timeout', %(timeout)s, true)"


@dataclass(eq=False)
class _Queued:
    """A statement waiting for the next round trip."""

    sql: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class _Last(_Queued):
    """``finish_with``'s statement, and what its failure is raised as."""

    refused: BaseException = field(default_factory=RuntimeError)
    cursor: psycopg.Cursor[Row] | None = None


class PostgresTx(NamedStatements[psycopg.Cursor[Row]]):
    """An open transaction on ``conn`` (in autocommit mode while it lasts), with named
    ``queries`` and savepoints, its bookkeeping sent with its statements."""

    backend = "postgres"

    def __init__(
        self, conn: Connection, queries: Mapping[str, str], cipher: Cipher = PLAIN
    ) -> None:
        self._conn = conn
        self.queries = queries
        self.cipher = cipher  # seals the columns that hold what users wrote
        self._queue: list[_Queued] = [_Queued("BEGIN")]
        remaining = deadline.left()
        if remaining is not None:
            timeout = f"{max(1, math.ceil(remaining * 1000))}ms"
            self._queue.append(_Queued(_STATEMENT_TIMEOUT, {"timeout": timeout}))
        self._opening = len(self._queue)  # what a transaction nothing ran in never sends
        self._begun = False  # has BEGIN been sent?
        self._depth = 0

    @property
    def conn(self) -> Connection:
        """The connection, for statements of the caller's own: what waits is sent first."""
        if self._queue:
            with self._conn.pipeline():
                self._send_queue()
        return self._conn

    def sql_many(self, statement: str, params: Sequence[Params]) -> int:
        with self._conn.cursor() as cur:
            with self._conn.pipeline():
                self._send_queue()
                cur.executemany(statement, params)
            return cur.rowcount  # the pipeline synced: every row counted

    def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> psycopg.Cursor[Row]:
        """The application's own statement (see `pigeon.storage.base.Tx.sql`)."""
        if not self._queue:
            return self._conn.execute(statement, params or {})
        with self._conn.pipeline():  # its results are the cursor's once the block ends
            self._send_queue()
            cursor = self._conn.execute(statement, params or {})
        return cursor

    def defer(self, statement: str, params: Mapping[str, Any]) -> None:
        """Send ``statement`` with the next round trip (the COMMIT's, if nothing runs
        before), its result never read. For a statement that cannot fail on its own, such
        as a write of a row this transaction holds locked: its error, if any, is raised by
        the statement or COMMIT it travels with, and is not told from theirs."""
        self._queue.append(_Queued(statement, params))

    def finish_with(self, name: str, params: Mapping[str, Any], refused: BaseException) -> None:
        """Run ``name`` right before the COMMIT, in its round trip; if it refuses (by a
        division by zero, told from a deferred statement's error), nothing of the
        transaction commits and ``refused`` is raised. Nothing else may run after it."""
        self._queue.append(_Last(self.queries[name], params, refused))

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        self._depth += 1
        name = f"pigeon_sp_{self._depth}"
        opened = _Queued(f"SAVEPOINT {name}")
        self._queue.append(opened)
        try:
            yield
        except BaseException:
            self._roll_back_to(opened, name)
            raise
        else:
            if self._queue and self._queue[-1] is opened:
                self._queue.pop()  # nothing ran in it
            else:
                self._queue.append(_Queued(f"RELEASE SAVEPOINT {name}"))
        finally:
            self._depth -= 1

    def _roll_back_to(self, opened: _Queued, name: str) -> None:
        """Undo the savepoint ``opened``: whatever was queued since is dropped; if its
        SAVEPOINT went out, what ran since is rolled back with the next round trip."""
        waiting = next((i for i, q in enumerate(self._queue) if q is opened), None)
        if waiting is not None:
            del self._queue[waiting:]  # nothing of it reached the server
            return
        # Sent: so was everything queued before it, and all that waits now came after.
        self._queue[:] = [
            _Queued(f"ROLLBACK TO SAVEPOINT {name}"),
            _Queued(f"RELEASE SAVEPOINT {name}"),
        ]

    def _send_queue(self) -> None:
        """Queue what waits in the pipeline the caller opened. A statement with parameters
        (a named query, deferred or last) is prepared once it recurs, as every other
        statement is; BEGIN, SAVEPOINT and RELEASE, whose names vary, never are."""
        queue, self._queue = self._queue, []
        for queued in queue:
            prepare = None if queued.params else False
            cursor = self._conn.execute(queued.sql, queued.params, prepare=prepare)
            if isinstance(queued, _Last):
                queued.cursor = cursor
        self._begun = True

    def commit(self) -> None:
        """The COMMIT, with whatever waits; nothing at all if no statement ever ran."""
        if not self._begun and len(self._queue) <= self._opening:  # BEGIN (and timeout)
            self._queue = []
            return
        last = next((q for q in self._queue if isinstance(q, _Last)), None)
        try:
            with self._conn.pipeline():
                self._send_queue()
                self._conn.execute("COMMIT", prepare=False)
        except psycopg.errors.DivisionByZero as exc:  # how finish_with's statement refuses
            if last is not None and last.cursor is not None and last.cursor.pgresult is None:
                raise last.refused from exc
            raise

    def rollback(self) -> None:
        """Roll back what was sent (nothing to do if nothing was); never raises, so the
        error that caused it is the one that propagates."""
        self._queue = []
        if self._begun and self._conn.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error, JobTimeout):  # past a deadline: closed
                self._conn.execute("ROLLBACK", prepare=False)


@contextlib.contextmanager
def transaction_on(
    conn: Connection, queries: Mapping[str, str], cipher: Cipher = PLAIN
) -> Iterator[PostgresTx]:
    """A ``PostgresTx`` on the idle pooled ``conn``: committed if the block ends, rolled
    back if it raises; ``conn`` handed back as it came (not in autocommit mode)."""
    conn.autocommit = True
    try:
        tx = PostgresTx(conn, queries, cipher)
        try:
            yield tx
            tx.commit()
        except BaseException:
            tx.rollback()
            raise
    finally:
        if conn.info.transaction_status == TransactionStatus.IDLE:
            conn.autocommit = False
        else:  # broken, or a ROLLBACK that failed: the pool must not lend it again
            conn.close()

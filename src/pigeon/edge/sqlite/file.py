"""The queue file: one SQLite database (WAL) with its named queries, the side lock that
tells whether other queues have it open, this queue's owner token (`pigeon.edge.owners`),
the recovery of what dead queues left in flight, and the transactions (``write``,
``batch``) every store method runs in.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from pigeon.core.ids import uuid4
from pigeon.edge import owners
from pigeon.storage.crypto import PLAIN, Cipher
from pigeon.storage.files import lock_file
from pigeon.storage.queries import load_queries
from pigeon.storage.sqlite import Durability, SQLiteDatabase, SQLiteTx

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, recover on every open
    fcntl = None  # type: ignore[assignment]

APPLICATION_ID = 0x50474E45  # "PGNE": a pigeon edge queue file
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
            return lock_file(path + "-lock")
    return None


class _ThisThread(threading.local):
    """This thread's ``batch()`` transaction. A class default, not ``getattr(local, "tx",
    None)``: a missing attribute of a ``threading.local`` raises and catches inside, ~0.5 µs
    twice per enqueue (hot path)."""

    tx: SQLiteTx | None = None


def init_state(tx: SQLiteTx) -> None:
    """Give a new file its state row, with a random node id for its clock (a no-op on a
    file that has one)."""
    tx.execute("init_state", {"node_id": uuid4().split("-")[0]})


class QueueFile:
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
            pragmas={"cache_size": -16384},
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
        new file gets its state row here, since a token is issued before anything else is
        written."""
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
                self.recover_owners(tx, now)
        self._owners.sweep()  # files of the dead with nothing in flight
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_SH)

    def recover_owners(self, tx: SQLiteTx, now: float) -> int:
        """Put the in-flight operations of owners that are gone back to pending, in
        ``tx``; how many owners were gone. Rows of live owners, of this queue and with no
        owner are never touched."""
        if not owners.FLOCK:
            return 0
        rows = tx.fetchall("in_flight_owners", {"me": self._owners.token})
        gone = self._owners.gone(r["owner"] for r in rows)
        if gone:
            tx.executemany("recover_owner", [{"owner": o, "now": now} for o in gone])
        return len(gone)

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

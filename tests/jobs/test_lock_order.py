"""PostgreSQL row locks taken by finishing and renewing a batch come in one order (job ids,
then record ids, ascending), so two transactions over overlapping rows queue behind each
other instead of deadlocking (which PostgreSQL breaks after ``deadlock_timeout`` by
aborting one of them: a lost finish or renewal, and a second of stall).

Each test holds one transaction part way through (a thin wrapper over the real database)
until the other transaction is seen waiting on a lock, the exact
interleaving that deadlocked before the locks were ordered."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from pigeon.jobs import records
from pigeon.jobs.job import Job, JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager, enqueue
from pigeon.storage.base import Database, Params, Row, Tx
from tests.databases import lock_waiters
from tests.waiting import wait_for


class _PausingTx:
    """A real transaction that calls ``hook`` once, right after the statement ``after``."""

    def __init__(self, tx: Tx, after: str, hook: Callable[[], None]) -> None:
        self.tx = tx
        self.backend = tx.backend
        self.cipher = tx.cipher
        self.after = after
        self.hook: Callable[[], None] | None = hook

    def _ran(self, name: str) -> None:
        if name == self.after and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> Any:
        result = self.tx.execute(name, params)
        self._ran(name)
        return result

    def fetchone(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        result = self.tx.fetchone(name, params)
        self._ran(name)
        return result

    def fetchall(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        result = self.tx.fetchall(name, params)
        self._ran(name)
        return result

    def executemany(self, name: str, params: Sequence[Params]) -> int:
        result = self.tx.executemany(name, params)
        self._ran(name)
        return result

    def savepoint(self) -> AbstractContextManager[None]:
        return self.tx.savepoint()


class _Pausing:
    """The database ``db``, whose transactions pause once after the statement ``after``."""

    def __init__(self, db: Database, after: str, hook: Callable[[], None]) -> None:
        self.db = db
        self.backend = db.backend
        self.cipher = db.cipher
        self.after = after
        self.hook = hook

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self.db.transaction() as tx:
            yield _PausingTx(tx, self.after, self.hook)

    @contextmanager
    def reading(self) -> Iterator[Tx]:
        with self.db.reading() as tx:
            yield _PausingTx(tx, self.after, self.hook)

    def close(self) -> None:
        pass


def _race(
    pg: Database,
    pg_url: str,
    pause_after: str,
    first: Callable[[Database], object],
    second: Callable[[], object],
) -> list[BaseException]:
    """Run ``first`` on a database that, after the statement ``pause_after``, starts
    ``second`` and waits until it is blocked on a lock before going on (failing, among
    the errors, if it is not within 3 s)."""
    errors: list[BaseException] = []

    def guarded(fn: Callable[[], object]) -> None:
        try:
            fn()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    other = threading.Thread(target=guarded, args=(second,))

    def hook() -> None:
        other.start()
        wait_for(lambda: lock_waiters(pg_url) > 0, 3, "the other transaction to wait on a lock")

    paused = _Pausing(pg, pause_after, hook)
    guarded(lambda: first(paused))
    if not other.is_alive() and other.ident is None:
        other.start()  # the statement never ran: still run the other side
    other.join(10)
    return errors


def _claim(pg: Database, n: int) -> list[Job]:
    with pg.transaction() as tx:
        for i in range(n):
            enqueue(tx, JobSpec("q", "t", {"i": i}))
    jobs = JobManager(pg).lease_jobs("q", "w", n, lease=30)
    assert [j.id for j in jobs] == sorted(j.id for j in jobs)
    return jobs


@pytest.mark.postgres
def test_a_finish_and_the_heartbeats_renewal_of_the_same_jobs_do_not_deadlock(
    pg: Database, pg_url: str
) -> None:
    # A batch whose first job failed and whose second succeeded: the successes are
    # recorded first (one statement), then the failure. The heartbeat renews both.
    first, second = _claim(pg, 2)
    finished: list[list[bool]] = []
    lost: list[list[Job]] = []

    def finish(db: Database) -> None:
        finished.append(
            JobManager(db).finish(
                [AttemptOutcome(first, RuntimeError("boom")), AttemptOutcome(second)]
            )
        )

    # Paused once the successes are recorded (their rows locked), the failure not yet.
    errors = _race(
        pg,
        pg_url,
        "job_succeed_many",
        finish,
        lambda: lost.append(JobManager(pg).renew([first, second], 30)),
    )
    assert errors == []
    assert finished == [[True, True]]
    assert [[j.id for j in js] for js in lost] == [[first.id, second.id]]  # both finished


@pytest.mark.postgres
def test_two_finishes_settling_the_same_records_in_opposite_orders_do_not_deadlock(
    pg: Database, pg_url: str
) -> None:
    # Records a and b each owe x and y; one batch finishes (a.x, b.x), the other
    # (b.y, a.y): the same two records, met in opposite orders.
    with pg.transaction() as tx:
        for rid in ("a", "b"):
            records.accept(
                tx,
                kind="k",
                data={},
                record_id=rid,
                obligations={"x": JobSpec("qx", "t"), "y": JobSpec("qy", "t")},
            )
    manager = JobManager(pg)
    xs = manager.lease_jobs("qx", "w", 2, lease=30)
    ys = manager.lease_jobs("qy", "w", 2, lease=30)
    by_record = {(j.record_id, j.obligation): j for j in xs + ys}
    batch_x = [by_record["a", "x"], by_record["b", "x"]]
    batch_y = [by_record["b", "y"], by_record["a", "y"]]
    results: list[list[bool]] = []

    def finish_x(db: Database) -> None:
        results.append(JobManager(db).finish([AttemptOutcome(j) for j in batch_x]))

    # Paused once the first record is locked, the second not yet.
    errors = _race(
        pg,
        pg_url,
        "rec_lock",
        finish_x,
        lambda: results.append(manager.finish([AttemptOutcome(j) for j in batch_y])),
    )
    assert errors == []
    assert results == [[True, True], [True, True]]
    assert records.get(pg, "a")["status"] == records.get(pg, "b")["status"] == "completed"


@pytest.mark.postgres
def test_two_finishes_of_one_records_obligations_do_not_deadlock(pg: Database, pg_url: str) -> None:
    # Each finish writes an attempt event first (its foreign key takes a KEY SHARE lock
    # on the record), then locks the record to settle: two such upgrades deadlock.
    with pg.transaction() as tx:
        records.accept(
            tx,
            kind="k",
            data={},
            record_id="a",
            obligations={"x": JobSpec("qx", "t"), "y": JobSpec("qy", "t")},
        )
    manager = JobManager(pg)
    (x,) = manager.lease_jobs("qx", "w", 1, lease=30)
    (y,) = manager.lease_jobs("qy", "w", 1, lease=30)
    results: list[list[bool]] = []

    def finish_x(db: Database) -> None:
        results.append(JobManager(db).finish([AttemptOutcome(x)]))

    errors = _race(
        pg,
        pg_url,
        "rec_event_insert",
        finish_x,
        lambda: results.append(manager.finish([AttemptOutcome(y)])),
    )
    assert errors == []
    assert results == [[True], [True]]
    assert records.get(pg, "a")["status"] == "completed"


@pytest.mark.postgres
def test_a_release_in_batch_order_and_a_renewal_do_not_deadlock(pg: Database, pg_url: str) -> None:
    # A batch's order is (scheduled_at, id): a retried job can come before a newer id.
    first, second = _claim(pg, 2)
    released: list[int] = []

    def release(db: Database) -> None:
        released.append(JobManager(db).release([second, first]))

    errors = _race(
        pg, pg_url, "job_requeue", release, lambda: JobManager(pg).renew([first, second], 30)
    )
    assert errors == []
    assert released == [2]

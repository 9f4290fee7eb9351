"""A thread's deadline bounds every wait it makes on a database: PostgreSQL's wait for a
pooled connection and for an answer (a dead server, a partition), SQLite's write locks.
Each blocker here lets go after a few seconds, so a wait that ignored the deadline fails
its test in that time rather than in the 10-30 s of the configured waits."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from pigeon.exceptions import JobTimeout
from pigeon.storage import deadline
from pigeon.storage.base import Database
from pigeon.storage.postgres import PostgresDatabase
from pigeon.storage.server import SERVER_APPLICATION_ID, server_queries
from pigeon.storage.sqlite import SQLiteDatabase
from tests.databases import lock_waiters, tables_locked
from tests.holding import held_in_a_thread
from tests.pgwire import RoundTrips
from tests.waiting import wait_for

BOUND = 0.3  # seconds of deadline each test gives
SLACK = 0.3  # how late past it the wait may end, on a busy 2-core machine
HELD = 3.0  # how long a blocker holds, far past BOUND + SLACK


def _timed_out(work: object) -> float:
    """Seconds until ``work()`` raised JobTimeout under a deadline BOUND away."""
    begun = time.monotonic()
    with pytest.raises(JobTimeout), deadline.waits_until(begun + BOUND):
        work()  # type: ignore[operator]
    return time.monotonic() - begun


def test_a_deadline_nests_the_earlier_one_holding() -> None:
    assert deadline.left() is None
    now = time.monotonic()
    with deadline.waits_until(now + 5):
        with deadline.waits_until(now + 60):
            limit, bounded = deadline.bound(60)
            assert bounded and 4 < limit <= 5
        assert deadline.bound(0.5) == (0.5, False)
    assert deadline.left() is None and deadline.bound(60) == (60, False)


@contextlib.contextmanager
def _until_later(seconds: float, end: Callable[[], object]) -> Iterator[None]:
    """``end()`` after ``seconds`` or as the block ends, whichever comes first."""
    timer = threading.Timer(seconds, end)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
        end()


def _locked_by_another_process(
    path: str, seconds: float
) -> contextlib.AbstractContextManager[None]:
    """Another connection holding the file's write lock (``tables_locked``) for ``seconds``
    at most."""
    return held_in_a_thread(tables_locked(path), seconds)


def test_sqlite_busy_wait_ends_by_the_deadline(sqlite_file: SQLiteDatabase) -> None:
    with _locked_by_another_process(sqlite_file.path, HELD):

        def write() -> None:
            with sqlite_file.transaction() as tx:
                tx.sql("DELETE FROM pigeon_jobs")

        assert _timed_out(write) < BOUND + SLACK
        assert _timed_out(lambda: sqlite_file.run_in_transaction(lambda tx: None)) < BOUND + SLACK
        # The busy wait is the configured one again outside the deadline.
        busy = sqlite_file.connection().execute("PRAGMA busy_timeout").fetchone()
        assert busy == {"timeout": 30000}


def test_sqlite_process_write_lock_waits_until_the_deadline(sqlite_file: SQLiteDatabase) -> None:
    with held_in_a_thread(sqlite_file.writer, HELD):
        assert _timed_out(lambda: sqlite_file.transaction().__enter__()) < BOUND + SLACK
    with sqlite_file.transaction() as tx:  # the lock was not left taken
        tx.sql("DELETE FROM pigeon_jobs")


def test_sqlite_without_a_deadline_waits_as_configured(sqlite_file: SQLiteDatabase) -> None:
    # Waits for the other writer, then runs.
    with _locked_by_another_process(sqlite_file.path, 0.4), sqlite_file.transaction() as tx:
        tx.sql("DELETE FROM pigeon_jobs")


def _select(db: PostgresDatabase) -> None:
    with db.transaction() as tx:
        tx.sql("SELECT 1").fetchall()


def test_pool_wait_ends_by_the_deadline(pg_relayed: PostgresDatabase, pg_relay: RoundTrips) -> None:
    _select(pg_relayed)
    pg_relay.cut()  # the pooled connection is dead and no new one can be made
    with _until_later(HELD, pg_relay.restore):
        assert _timed_out(lambda: _select(pg_relayed)) < BOUND + SLACK


def test_answer_wait_ends_by_the_deadline(
    pg_relayed: PostgresDatabase, pg_relay: RoundTrips
) -> None:
    _select(pg_relayed)
    pg_relay.stall()  # a partition: the statement goes out, no answer comes back
    with _until_later(HELD, pg_relay.restore):
        assert _timed_out(lambda: _select(pg_relayed)) < BOUND + SLACK
    _select(pg_relayed)  # the stalled connection was not lent again


def test_a_deadline_already_past_asks_for_nothing(pg_url: str) -> None:
    db = PostgresDatabase(pg_url, queries=server_queries("postgres"))
    try:
        asked = db.pool.get_stats().get("requests_num", 0)
        with pytest.raises(JobTimeout), deadline.waits_until(time.monotonic() - 1):
            _select(db)
        assert db.pool.get_stats().get("requests_num", 0) == asked
        _select(db)
    finally:
        db.close()


def test_a_deadline_already_past_opens_no_sqlite_transaction(sqlite_file: SQLiteDatabase) -> None:
    with deadline.waits_until(time.monotonic() - 1):
        for immediate in (True, False):
            with pytest.raises(JobTimeout), sqlite_file.transaction(immediate=immediate):
                pass
    with sqlite_file.transaction() as tx:  # nothing was left taken
        tx.sql("DELETE FROM pigeon_jobs")


def test_the_busy_wait_put_back_is_the_configured_one(tmp_path: Path) -> None:
    db = SQLiteDatabase(
        tmp_path / "server.db",
        application_id=SERVER_APPLICATION_ID,
        components=("server",),
        queries=server_queries("sqlite"),
        pragmas={"busy_timeout": 5000},
    )
    try:
        with deadline.waits_until(time.monotonic() + 2), db.transaction():
            assert db.connection().execute("PRAGMA busy_timeout").fetchone() == {"timeout": 5000}
        assert db.connection().execute("PRAGMA busy_timeout").fetchone() == {"timeout": 5000}
    finally:
        db.close()


def test_a_statement_past_the_deadline_stops_on_the_server(
    pg: PostgresDatabase, pg_url: str
) -> None:
    # A row another transaction holds locked: the deadline's statement waits for it. The
    # client gives up at the deadline; the server must stop waiting then too, not when
    # the holder lets go (a backend waiting for a lock never notices its client is gone).
    with pg.transaction() as tx:
        tx.sql(
            "INSERT INTO pigeon_effects (scope, key, result, created_at) VALUES ('s', 'k', '1', 0)"
        )
    with psycopg.connect(pg_url) as holder:
        holder.execute("SELECT * FROM pigeon_effects WHERE scope = 's' FOR UPDATE").fetchall()

        def update() -> None:
            with pg.transaction() as tx:
                tx.sql("UPDATE pigeon_effects SET result = '2' WHERE scope = 's' AND key = 'k'")

        assert _timed_out(update) < BOUND + SLACK
        wait_for(
            lambda: not lock_waiters(pg_url), HELD, "the statement to stop waiting on the server"
        )
        holder.rollback()
    # Without a deadline a transaction sets no statement timeout of its own.
    with pg.transaction() as tx:
        assert tx.sql("SHOW statement_timeout").fetchone() == {"statement_timeout": "0"}


def test_the_servers_statement_timeout_under_a_deadline_is_a_job_timeout(pg: Database) -> None:
    # Whichever comes first, the client's wait or the server's timeout, a statement cut
    # off under a deadline is the deadline's JobTimeout (here the server's, made shorter).
    def sleep() -> None:
        with pg.transaction() as tx:
            tx.sql("SET LOCAL statement_timeout = 50")
            tx.sql("SELECT pg_sleep(2)")

    assert _timed_out(sleep) < BOUND

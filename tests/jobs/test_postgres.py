"""What only PostgreSQL does: SKIP LOCKED batch claims, plans off sequential scans,
LISTEN/NOTIFY wake-ups and pickup latency, surviving terminated connections."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from pigeon.exceptions import StoreUnavailable
from pigeon.jobs.app import App
from pigeon.jobs.context import JobContext
from pigeon.jobs.effects import applied
from pigeon.jobs.failed import list_jobs, show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager, enqueue
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.stores.postgres import ListenWakeup
from pigeon.jobs.timeouts import Timeouts
from pigeon.jobs.wakeup import channel
from pigeon.jobs.worker import STUCK, Worker
from pigeon.storage.base import Database
from pigeon.storage.postgres import PostgresDatabase
from pigeon.storage.queries import load_queries
from pigeon.storage.server import server_queries
from tests.conftest import PG_ADMIN_DSN
from tests.waiting import wait_for

from .threads import run_in_thread


def test_every_sqlite_query_has_a_postgres_twin() -> None:
    missing = load_queries("sqlite", "jobs").keys() - load_queries("postgres", "jobs").keys()
    assert not missing


def test_channel_names_agree_with_the_database(pg: Database) -> None:
    names = ["grading", "Mixed Case", "é" * 30, "q" * 51, "q" * 52, "x" * 200]
    with pg.transaction() as tx:
        conn = tx.conn  # type: ignore[attr-defined]
        for name in names:
            row = conn.execute("SELECT pigeon_jobs_channel(%s) AS c", (name,)).fetchone()
            assert row["c"] == channel(name)
            assert len(channel(name).encode()) <= 63


def test_concurrent_batch_claims_never_share_a_job(pg: Database) -> None:
    with pg.transaction() as tx:
        for n in range(1000):
            enqueue(tx, JobSpec("q", "t", {"n": n}))
    claimed: list[list[int]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def drain(slot: int) -> None:
        m = JobManager(pg)
        barrier.wait()
        while jobs := m.lease_jobs("q", f"w{slot}", 25, lease=30):
            claimed[slot].extend(j.id for j in jobs)
            assert m.finish([AttemptOutcome(j) for j in jobs]) == [True] * len(jobs)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for ids in claimed for i in ids]
    assert len(everything) == len(set(everything)) == 1000
    assert sum(1 for ids in claimed if ids) >= 2  # they really ran side by side
    assert {j["attempts"] for j in list_jobs(pg, limit=2000)} == {1}


_PLANNED = {
    # query name -> parameters; every claim, finish and lookup of the jobs tables
    "job_claim": {
        "queue": "q1",
        "worker": "w",
        "token": "t",
        "now": 5e9,
        "until": 6e9,
        "n": 8,
        "start": 1,
        "versions": '{"t": 2, "u": 1}',
    },
    "job_claim_start": {
        "queue": "q1",
        "worker": "w",
        "token": "t",
        "now": 5e9,
        "until": 6e9,
        "n": 8,
        "start": 1,
        "versions": '{"t": 2, "u": 1}',
    },
    "job_start": {"id": 5, "attempt": 1, "token": "t", "now": 1.0},
    "job_queue_pressure": {"queue": "q1", "now": 5e9, "cap": 100},
    "job_succeed": {"id": 5, "attempt": 1, "token": "t", "now": 1.0},
    "job_succeed_many": {
        "ids": [5, 6],
        "attempts": [1, 1],
        "tokens": ["t", "u"],
        "started": [0.5, 0.5],
        "now": 1.0,
    },
    "job_renew": {"id": 5, "attempt": 1, "token": "t", "until": 1.0},
    "job_renew_many": {"ids": [5, 6], "attempts": [1, 1], "tokens": ["t", "u"], "until": 1.0},
    "job_lock_many": {"ids": [5, 6]},
    "rec_lock_many": {"record_ids": ["r5", "r6"]},
    "job_requeue": {
        "id": 5,
        "attempt": 1,
        "token": "t",
        "scheduled_at": 1.0,
        "error": "e",
        "refund": 0,
    },
    "job_fail": {
        "id": 5,
        "attempt": 1,
        "token": "t",
        "now": 1.0,
        "error": "e",
        "owner": "o",
        "not_before": 0.0,
    },
    "job_attempt_start": {"job_id": 5, "attempt": 2, "worker": "w", "now": 1.0},
    "job_attempt_finish": {
        "job_id": 5,
        "attempt": 1,
        "outcome": "succeeded",
        "error": None,
        "now": 1.0,
        "started_at": 0.5,
    },
    "job_attempt_lost": {"job_id": 5, "attempt": 2, "now": 1.0},
    "job_attempts": {"job_id": 5},
    "job_get": {"id": 5},
    "job_by_unique_key": {"unique_key": "k5"},
    "job_list": {"status": "failed", "queue": None, "limit": 50},
    "job_review_retry": {"id": 5, "now": 1.0},
    "job_review_cancel": {"id": 5, "now": 1.0},
    "job_reviews": {"job_id": 5},
    "job_service_times": {"queue": "q1", "limit": 200},
    "outbox_pending": {"limit": 100},
    "outbox_mark_published": {"id": 5, "now": 1.0},
    "outbox_purge": {"before": 100.0, "limit": 1000},
    "outbox_lag": {},
}


def test_claims_and_lookups_stay_off_sequential_scans(pg: Database) -> None:
    with pg.transaction() as tx:
        conn = tx.conn  # type: ignore[attr-defined]
        # History as a busy system has it: mostly finished jobs, a few ready, reserved,
        # delayed and failed, over several queues; attempts and outbox rows to match.
        conn.execute(
            """
            INSERT INTO pigeon_jobs (queue, task, payload, status, max_attempts, created_at,
                                     budget_start, scheduled_at, reserved_until, lease_token,
                                     attempts, finished_at, unique_key, owner)
            SELECT 'q' || (i % 4), 't', '{}',
                   CASE WHEN i % 50 = 0 THEN 'queued' WHEN i % 50 = 1 THEN 'reserved'
                        WHEN i % 50 = 2 THEN 'failed' ELSE 'succeeded' END,
                   5, i, i, i + (i % 7) * 1e9, CASE WHEN i % 50 = 1 THEN i + 30 END, 't',
                   1, i + 1, 'k' || i, 'o'
            FROM generate_series(1, 10000) AS i
            """
        )
        conn.execute(
            "INSERT INTO pigeon_job_attempts (job_id, attempt, worker, started_at, "
            "finished_at, outcome) SELECT id, 1, 'w', created_at, created_at + 1, "
            "'succeeded' FROM pigeon_jobs"
        )
        conn.execute(
            "INSERT INTO pigeon_outbox (message_id, topic, payload, created_at, published_at) "
            "SELECT 'm' || i, 't', '{}', i, CASE WHEN i % 10 = 0 THEN NULL ELSE i END "
            "FROM generate_series(1, 10000) AS i"
        )
    queries = load_queries("postgres", "jobs")
    with pg.transaction() as tx:
        conn = tx.conn  # type: ignore[attr-defined]
        conn.execute("ANALYZE")
        for mode in ("force_custom_plan", "force_generic_plan"):
            conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
            for name, params in _PLANNED.items():
                conn.execute(f"PREPARE plan_{name} AS {_numbered(queries[name], params)}")
                args = ", ".join(["%s"] * len(params))
                # Literal arguments: the client cursor interpolates them, PREPARE typed them.
                with psycopg.ClientCursor(conn) as cur:
                    call = f"plan_{name}({args})" if params else f"plan_{name}"
                    cur.execute(f"EXPLAIN EXECUTE {call}", list(params.values()))
                    rows = cur.fetchall()
                conn.execute(f"DEALLOCATE plan_{name}")
                plan = "\n".join(r["QUERY PLAN"] for r in rows)
                for table in ("pigeon_jobs", "pigeon_job_attempts", "pigeon_outbox"):
                    assert f"Seq Scan on {table}" not in plan, f"{name} ({mode}):\n{plan}"
                if name in _CLAIMS:  # the version filter leaves the claim on its indexes
                    for index in _CLAIMS[name]:
                        assert index in plan, f"{name} ({mode}):\n{plan}"


# The claims read due jobs through the partial indexes made for them, whatever the
# claimer's {task: version} filter (one parameter, cast once).
_CLAIMS = {
    "job_claim": ("pigeon_jobs_ready", "pigeon_jobs_reserved"),
    "job_claim_start": ("pigeon_jobs_ready", "pigeon_jobs_reserved"),
}


def _numbered(query: str, params: dict[str, object]) -> str:
    """%(name)s -> $n, with the types PREPARE cannot guess from an untyped parameter."""
    types = {
        "ids": "bigint[]",
        "attempts": "integer[]",
        "tokens": "text[]",
        "record_ids": "text[]",
        "started": "double precision[]",
    }
    for i, key in enumerate(params, start=1):
        value = params[key]
        kind = types.get(key) or (
            "double precision"
            if isinstance(value, float)
            else "bigint"
            if isinstance(value, int)
            else "text"
        )
        query = query.replace(f"%({key})s", f"${i}::{kind}")
    return query


def test_notify_is_sent_at_commit_and_never_for_a_rollback(pg: Database, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{channel("grading")}"')
        with pytest.raises(RuntimeError), pg.transaction() as tx:
            enqueue(tx, JobSpec("grading", "grade"))
            raise RuntimeError("intake failed")
        assert list(listener.notifies(timeout=0.3)) == []
        with pg.transaction() as tx:
            for _ in range(50):
                enqueue(tx, JobSpec("grading", "grade"))
            enqueue(tx, JobSpec("other", "x"))
        notes = list(listener.notifies(timeout=0.3))
    # one wake-up per committed transaction and queue, not one per job
    assert [n.channel for n in notes] == [channel("grading")]


def test_idle_workers_pick_up_within_milliseconds(pg: Database) -> None:
    app = App()
    started: dict[int, float] = {}

    @app.task(queue="fast")
    def mark(n: int) -> None:
        started[n] = time.time()

    # Polling every 5 s: only a NOTIFY can explain a quick pickup.
    worker = Worker(app, pg, {"fast": 2}, WorkerOptions(poll=5.0, poll_max=5.0))
    assert isinstance(worker.wakeup, ListenWakeup)
    thread = run_in_thread(worker)
    try:
        assert worker.wakeup.listening.wait(10)
        time.sleep(0.2)  # both threads made their first, empty claim and sleep now
        committed: dict[int, float] = {}
        m = JobManager(pg, app)
        for n in range(30):
            m.enqueue(JobSpec("fast", "mark", {"n": n}))
            committed[n] = time.time()
            wait_for(lambda n=n: n in started, timeout=5)  # type: ignore[misc]
            time.sleep(0.01)
    finally:
        worker.stop()
        thread.join()
    latencies = sorted(started[n] - committed[n] for n in committed)
    assert statistics.median(latencies) < 0.05, latencies
    assert latencies[-1] < 1.0, latencies


def _succeeded(db: Database, limit: int) -> int:
    """How many jobs succeeded; -1 while this test's own connections are being cut too."""
    try:
        return len(list_jobs(db, status="succeeded", limit=limit))
    except StoreUnavailable:
        return -1


def _admin_terminate(dbname: str) -> int:
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        ).fetchall()
    return len(rows)


def _backends(dbname: str) -> int:
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (dbname,)
        ).fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def _outage(dbname: str) -> Iterator[None]:
    """The test database refuses connections and loses the ones it had, like a restart
    that takes a while; the shared server itself keeps running for everyone else."""
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{dbname}" WITH ALLOW_CONNECTIONS false')
        try:
            _admin_terminate(dbname)
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{dbname}" WITH ALLOW_CONNECTIONS true')


def test_terminated_connections_reconnect_and_recover_leased_jobs(
    pg: Database, pg_url: str
) -> None:
    dbname = pg_url.rsplit("/", 1)[1]
    app = App()
    app.queue("q", timeouts=Timeouts(job=0.5, external_call=0.2, supervisor=0.8, lease=1.0))

    hold_next, holding, released = threading.Event(), threading.Event(), threading.Event()

    @app.task(queue="q", context=True)
    def work(ctx: JobContext, n: int) -> None:
        time.sleep(0.01)
        ctx.effect(f"work:{n}", lambda tx: n)
        if hold_next.is_set() and not holding.is_set():
            # One job is surely held when the database goes away (not left to timing):
            # its effect is done; its success is reported during the outage.
            holding.set()
            released.wait(0.45)  # within its job timeout

    jobs = 300
    with pg.transaction() as tx:
        for n in range(jobs):
            enqueue(tx, JobSpec("q", "work", {"n": n}, max_attempts=20))
    # A job that touches the database during the outage waits for a connection until its
    # own timeout (not the pool's 10 s, far past the 0.8 s supervisor timeout), so it fails
    # and is retried like any other (test_job_deadline.py); the worker's claims and
    # renewals wait as configured, so this pool gives up quickly to keep the test short.
    quick = PostgresDatabase(pg_url, queries=server_queries("postgres"), acquire_timeout=0.2)
    worker = Worker(app, quick, {"q": 2}, WorkerOptions(batch=10, poll_max=5.0))
    thread = run_in_thread(worker)
    try:
        assert isinstance(worker.wakeup, ListenWakeup)
        wait_for(lambda: _succeeded(pg, jobs) >= 20)
        assert _admin_terminate(dbname) >= 2  # the pool's and the listener's connections
        time.sleep(0.3)
        hold_next.set()
        assert holding.wait(10)
        with _outage(dbname):
            time.sleep(0.25)
            released.set()
            time.sleep(1.4)  # longer than the lease: held jobs can no longer be finished
        wait_for(lambda: _backends(dbname) >= 2)  # reconnected, then cut once more
        assert _admin_terminate(dbname) >= 2
        wait_for(lambda: _succeeded(pg, jobs) == jobs, 60)
        # ... and the listener is back: a new job is picked up without waiting for a poll
        assert worker.wakeup.listening.wait(10) and worker.wakeup.connects >= 3
        sent = time.monotonic()
        JobManager(pg, app).enqueue(JobSpec("q", "work", {"n": jobs}))
        wait_for(lambda: applied(pg, "work", f"work:{jobs}"), timeout=3)
        pickup = time.monotonic() - sent
    finally:
        worker.stop()
        thread.join()
        quick.close()
    rows = list_jobs(pg, limit=jobs + 1)
    assert {r["status"] for r in rows} == {"succeeded"} and len(rows) == jobs + 1
    assert pickup < 2.0
    with pg.transaction() as tx:
        conn = tx.conn  # type: ignore[attr-defined]
        effects = conn.execute("SELECT count(*) AS n FROM pigeon_effects").fetchone()["n"]
    assert effects == jobs + 1  # every effect exactly once
    # Jobs the worker held when the database went away were recovered after their lease
    # expired, by a later claim (attempt 2+), not lost.
    # (A report that got through late, once the database was back, is recorded by its
    # original holder: finishing compares the lease token, not the clock.)
    histories = [show_job(pg, r["id"])["history"] for r in rows if r["attempts"] > 1]
    assert all(h[-1]["outcome"] == "succeeded" for h in histories)
    if worker.stats.unrecorded:
        assert any(a["outcome"] == "lease_expired" for h in histories for a in h[:-1])


def test_a_stuck_job_is_abandoned_on_time_while_the_database_is_away(
    pg: Database, pg_url: str
) -> None:
    # The lease is renewed by a database write, which an outage holds for up to the pool's
    # acquire timeout (10 s); the supervisor deadline must not wait for it: past the lease
    # the job is rescued, and its stuck runner would still be running it.
    dbname = pg_url.rsplit("/", 1)[1]
    app = App()
    app.queue("q", timeouts=Timeouts(job=0.5, external_call=0.2, supervisor=0.8, lease=1.5))
    started, release = threading.Event(), threading.Event()

    @app.task(queue="q")
    def spin() -> None:
        started.set()
        release.wait(10)  # stuck in the job's own code, never in the database

    JobManager(pg, app).enqueue(JobSpec("q", "spin"))
    abandoned: list[float] = []
    worker = Worker(app, pg, {"q": 1}, on_stuck=lambda: abandoned.append(time.monotonic()))
    thread = run_in_thread(worker)
    try:
        assert started.wait(10)
        begun = time.monotonic()
        with _outage(dbname):
            wait_for(lambda: bool(abandoned), timeout=3)
    finally:
        release.set()
        worker.stop()
        thread.join()
    assert abandoned[0] - begun < 0.8 + 0.3 and worker.exit_code == STUCK

"""Jobs on PostgreSQL, side by side in one run on the same server:

* no-op job drain with 1 and 4 workers: pigeon (batched SKIP LOCKED claims, set-based
  completions, leases, at-least-once) vs procrastinate 3 at the same concurrency, and vs
  a raw psycopg cycle (claim one job with SKIP LOCKED, mark it done, commit; one
  connection per worker);
* pickup latency, enqueue committed -> job started, with idle workers: LISTEN/NOTIFY vs
  the same workers polling.

Each contender gets its own fresh database, dropped afterwards, and its jobs table
ANALYZEd after the bulk load, as its users' autovacuum would (this machine's PostgreSQL
runs with it off). Each drain is timed alike, from the first job's start to the last
job's end: pigeon and procrastinate by their job histories (pigeon's attempts; the
task's first call and procrastinate's last "succeeded" event), the raw cycle from the
first claim made to the last commit; none pays its workers' start on the clock. The
server is named by PIGEON_BENCH_PG_DSN (default: the local one).
``python -m bench --only jobs_pg``
"""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from bench._report import Row, row
from bench.jobs_bench import pigeon_drain
from pigeon.jobs.app import App
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import JobManager
from pigeon.jobs.supervisor import WorkerOptions
from pigeon.jobs.timeouts import Timeouts
from pigeon.jobs.wakeup import Wakeup
from pigeon.jobs.worker import Worker
from pigeon.storage.server import open_server_db

ADMIN_DSN = os.environ.get("PIGEON_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
WORKERS = (1, 4)


@contextmanager
def fresh_database(label: str) -> Iterator[str]:
    name = f"pigeon_bench_{label}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(ADMIN_DSN)
    url = (
        f"postgresql://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}:"
        f"{info.get('port', 5432)}/{name}"
    )
    try:
        yield url
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- pigeon ---------------------------------------------------------------------------


def _pigeon_drain(n: int, workers: int) -> float:
    """``workers`` worker processes of one thread each, on a fresh database."""
    with fresh_database(f"pigeon{workers}") as url:
        options = WorkerOptions(batch=100, prefetch=100, schedules=False)
        return pigeon_drain(url, n, workers, options)


def _pigeon_latency(samples: int, *, notify: bool) -> list[float]:
    """Seconds from an enqueue's commit to its job starting, two idle worker threads."""
    latency_app = App()
    latency_app.queue("fast", timeouts=Timeouts(job=10))
    started: dict[int, float] = {}
    event = threading.Event()

    @latency_app.task(queue="fast")
    def mark(i: int) -> None:
        started[i] = time.perf_counter()
        event.set()

    with fresh_database("latency") as url:
        db = open_server_db(url)
        worker = Worker(latency_app, db, {"fast": 2}, WorkerOptions(schedules=False))
        if not notify:  # the same workers, woken only by their polling back-off
            worker.wakeup = Wakeup(worker.queues)
        thread = threading.Thread(target=worker.run, kwargs={"grace": 5}, daemon=True)
        thread.start()
        manager = JobManager(db, latency_app)
        latencies = []
        try:
            time.sleep(1.0)  # listening, first empty claims made, threads idle
            for i in range(samples):
                event.clear()
                manager.enqueue(JobSpec("fast", "mark", {"i": i}))
                committed = time.perf_counter()
                if not event.wait(10):
                    raise RuntimeError(f"job {i} was not picked up")
                latencies.append(started[i] - committed)
                time.sleep(0.02 if notify else 0.3)  # idle again before the next one
        finally:
            worker.stop()
            thread.join()
            db.close()
        return latencies


# -- procrastinate ----------------------------------------------------------------------


def _procrastinate_drain(n: int, concurrency: int) -> float:
    import procrastinate

    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    with fresh_database(f"procrastinate{concurrency}") as url:
        papp = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

        first: list[float] = []

        @papp.task(name="noop", queue="bench")
        async def noop(i: int) -> None:
            if not first:  # the clock starts with the first job, as pigeon's history does
                first.append(time.time())

        async def main() -> float:
            async with papp.open_async():
                await papp.schema_manager.apply_schema_async()
                await noop.batch_defer_async(*[{"i": i} for i in range(n)])
                # As its users' autovacuum would: this machine's runs with autovacuum off,
                # and a stale plan on the fresh table made procrastinate about 3x slower.
                pool = papp.connector.pool  # type: ignore[attr-defined]
                async with pool.connection() as conn:
                    await conn.execute("ANALYZE procrastinate_jobs")
                await papp.run_worker_async(
                    queues=["bench"],
                    concurrency=concurrency,
                    wait=False,
                    install_signal_handlers=False,
                )
                async with pool.connection() as conn:
                    cur = await conn.execute(  # its job history's last end, as pigeon's
                        "SELECT count(*), extract(epoch FROM max(at))::float8 "
                        "FROM procrastinate_events WHERE type = 'succeeded'"
                    )
                    (done, last) = await cur.fetchone()
                assert done == n, (done, n)
                return n / (last - first[0])

        return asyncio.run(main())


# -- raw psycopg --------------------------------------------------------------------------

_RAW_SCHEMA = """
CREATE TABLE raw_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                       status text NOT NULL, payload text NOT NULL);
CREATE INDEX raw_jobs_queued ON raw_jobs (id) WHERE status = 'queued';
"""
_RAW_CLAIM = (
    "SELECT id, payload FROM raw_jobs WHERE status = 'queued' ORDER BY id LIMIT 1 "
    "FOR UPDATE SKIP LOCKED"
)
_RAW_DONE = "UPDATE raw_jobs SET status = 'done' WHERE id = %s"


def _raw_drain(n: int, connections: int) -> float:
    with fresh_database(f"raw{connections}") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(_RAW_SCHEMA)
            conn.execute(
                "INSERT INTO raw_jobs (status, payload) "
                "SELECT 'queued', '{}' FROM generate_series(1, %s)",
                (n,),
            )
            conn.execute("ANALYZE raw_jobs")
        done = [0] * connections
        firsts: list[float] = []  # each connection's first job started (claimed)
        barrier = threading.Barrier(connections + 1)

        def cycle(slot: int) -> None:
            with psycopg.connect(url) as conn:
                barrier.wait()
                while True:
                    with conn.transaction():
                        claimed = conn.execute(_RAW_CLAIM).fetchone()
                        if claimed is None:
                            return
                        if not done[slot]:
                            firsts.append(time.perf_counter())
                        conn.execute(_RAW_DONE, (claimed[0],))
                    done[slot] += 1

        threads = [threading.Thread(target=cycle, args=(i,)) for i in range(connections)]
        for t in threads:
            t.start()
        barrier.wait()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - min(firsts)
        assert sum(done) == n, (done, n)
        return n / elapsed


# -- the run --------------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(quick: bool = False) -> list[Row]:
    n = 5_000 if quick else 20_000
    rows: list[Row] = []
    for workers in WORKERS:
        plural = "s" if workers > 1 else ""
        pigeon_rate = _pigeon_drain(n, workers)
        theirs = _procrastinate_drain(n // 2 if quick else n // 4, workers)
        raw = _raw_drain(n // 2 if quick else n // 4, workers)
        rows.append(
            row(
                f"PG no-op job drain, {workers} worker{plural}",
                pigeon_rate,
                theirs,
                unit="jobs/s",
                baseline_name=f"procrastinate concurrency {workers}",
                target=">= 5x",
                ok=pigeon_rate >= 5 * theirs,
            )
        )
        rows.append(
            row(
                f"PG no-op job drain, {workers} worker{plural} vs raw cycle",
                pigeon_rate,
                raw,
                unit="jobs/s",
                baseline_name=f"psycopg SKIP LOCKED 1 job/tx, {workers} conn",
                target=">= 1.5x",
                ok=pigeon_rate >= 1.5 * raw,
            )
        )
    samples = 40 if quick else 200
    notified = _pigeon_latency(samples, notify=True)
    polled = _pigeon_latency(max(10, samples // 5), notify=False)
    p50 = statistics.median(notified) * 1000
    p99 = _percentile(notified, 0.99) * 1000
    rows.append(
        row(
            "PG pickup latency p50, idle workers (enqueue commit -> start)",
            p50,
            statistics.median(polled) * 1000,
            unit="ms",
            baseline_name="same workers polling",
            target="p50 <= 5 ms",
            ok=p50 <= 5.0,
            higher_is_better=False,
        )
    )
    rows.append(
        row(
            "PG pickup latency p99, idle workers",
            p99,
            _percentile(polled, 0.99) * 1000,
            unit="ms",
            baseline_name="same workers polling",
            target="report",
            ok=True,
            higher_is_better=False,
        )
    )
    return rows


if __name__ == "__main__":
    from bench._report import print_rows

    print_rows(run(quick=True))

"""No-op job drain: pigeon workers (leases, batched claims and completions, at-least-once)
against huey's SqliteHuey (which deletes each job as it dequeues it: at-most-once), in the
same run on the same disk; and what enqueuing jobs inside an intake transaction costs.

Both run as their users run them, at their default durability: every commit synced
(pigeon's "full"; huey's WAL with SQLite's default synchronous=FULL). Both drains are
timed alike, from the first job's start to the last job's end, so that neither pays its
start on the clock (pigeon: worker processes spawned, imports, first connection and
claim, per its job history; huey: its first dequeue, per the task's own first call).
The intake cost compares the two kinds of intake transaction after an untimed pass of
each.

``python -m bench --only jobs``
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._report import Row, row
from pigeon.jobs import records
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import enqueue
from pigeon.jobs.supervisor import Supervisor, WorkerOptions
from pigeon.storage.server import open_server_db

BENCH_APP = "pigeon.reference.jobs:app"


def pigeon_drain(url: str, n: int, processes: int, options: WorkerOptions) -> float:
    """Jobs per second from the first claim to the last completion, per the job history,
    with ``processes`` worker processes on the database at ``url`` (SQLite or PostgreSQL)."""
    db = open_server_db(url, durability=options.durability)
    with db.transaction() as tx:
        for i in range(n):
            enqueue(tx, JobSpec("bench", "noop", {"i": i}))
    if url.startswith("postgres"):  # as for every baseline: statistics after the bulk load
        with db.transaction() as tx:
            tx.conn.execute("ANALYZE pigeon_jobs")  # type: ignore[attr-defined]
    sup = Supervisor(
        "bench.jobs_bench:app", url, {"bench": processes}, processes=processes, options=options
    )
    sup.start()
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with db.transaction() as tx:
                stats = tx.fetchall("job_queue_stats", {"now": time.time()})
            if stats and stats[0]["succeeded"] == n:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("pigeon drain did not finish")
    finally:
        sup.stop(grace=10)
    with db.transaction() as tx:
        span = tx.conn.execute(  # type: ignore[attr-defined]
            "SELECT min(started_at) AS a, max(finished_at) AS b, count(*) AS n "
            "FROM pigeon_job_attempts WHERE outcome = 'succeeded'"
        ).fetchone()
    db.close()
    assert span["n"] == n, span
    return n / (span["b"] - span["a"])


def _huey_drain(folder: Path, n: int) -> float:
    from huey import SqliteHuey

    huey = SqliteHuey(filename=str(folder / "huey.db"))
    first: list[float] = []

    @huey.task()
    def noop(i: int) -> None:
        if not first:  # the clock starts with the first job, as pigeon's history does
            first.append(time.perf_counter())

    for i in range(n):
        noop(i)
    done = 0
    while (task := huey.dequeue()) is not None:
        huey.execute(task)
        done += 1
    elapsed = time.perf_counter() - first[0]
    assert done == n, (done, n)
    return n / elapsed


def _intake_cost(folder: Path, n: int) -> tuple[float, float]:
    """Seconds per intake transaction: a record alone vs a record with two jobs."""
    db = open_server_db(folder / "intake.db", durability="normal")
    obligations = {
        "grading": JobSpec("grading", "grade", {"answer_id": "a"}),
        "notify": JobSpec("notify", "send", {"to": "ana", "message": "m"}),
    }

    def intakes(with_jobs: bool) -> float:
        started = time.perf_counter()
        for i in range(n):
            with db.transaction() as tx:
                records.accept(
                    tx,
                    kind="answer",
                    data={"i": i, "answer": "42"},
                    obligations=obligations if with_jobs else None,
                )
        return (time.perf_counter() - started) / n

    intakes(False), intakes(True)  # warm up both: statements, imports, caches
    plain, with_jobs = intakes(False), intakes(True)
    db.close()
    return plain, with_jobs


def run(quick: bool = False) -> list[Row]:
    n = 5_000 if quick else 20_000
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        huey_rate = _huey_drain(folder, n)
        for processes in (1, 2):
            options = WorkerOptions(batch=200, prefetch=200, schedules=False)
            rate = pigeon_drain(str(folder / f"drain-{processes}.db"), n, processes, options)
            rows.append(
                row(
                    f"no-op job drain, {processes} worker{'s' if processes > 1 else ''} "
                    "(leased, at-least-once)",
                    rate,
                    huey_rate,
                    unit="jobs/s",
                    baseline_name="huey SqliteHuey",
                    target=">= 2x",
                    ok=rate >= 2 * huey_rate,
                )
            )
        plain, with_jobs = _intake_cost(folder, 500 if quick else 2_000)
        # Here the ratio is the cost: time with jobs / time without (lower is cheaper).
        rows.append(
            row(
                "intake tx + 2 jobs, cost vs record-only intake (µs per intake)",
                with_jobs * 1e6,
                plain * 1e6,
                unit="µs",
                baseline_name="record only",
                target="report ratio",
                ok=True,
            )
        )
    return rows


# The app the benchmark's worker processes import ("bench.jobs_bench:app").
def _make_app() -> Any:
    from pigeon.jobs.app import App
    from pigeon.jobs.timeouts import Timeouts

    bench_app = App()
    bench_app.queue("bench", max_workers=8, timeouts=Timeouts(job=10))

    @bench_app.task(queue="bench")
    def noop(i: int) -> None:
        return None

    return bench_app


app = _make_app()

if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    from bench._report import print_rows

    print_rows(run(quick=True))

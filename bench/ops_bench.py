"""The operations page's render time (``GET /pigeon/`` through a real uvicorn, the median of
several loads), beside a raw limit in the same run: the same figures by bare SQL (one
GROUP BY per table, exact, no pigeon code, no HTML).

- 10,000 records x 3 obligations with failures (tests/ops/scenario.py, made through the
  library), on SQLite and on PostgreSQL;
- 1,000,000 jobs in ``pigeon_jobs`` on PostgreSQL (333,334 records x 3 obligations over 30
  days, bulk-inserted by SQL: most succeeded, failures in two classes, a backlog of 6,000
  ready jobs, reserved and stuck ones), target under 200 ms; counts past 10,000 are the
  planner's estimates there, labelled on the page.

Both the page and the raw limit get one untimed load before their timed ones
(connections, templates, plans; psycopg prepares a statement at its fifth use, so an
extra warm load on one side only would hand it prepared statements sooner).

``python -m bench --only ops`` (PIGEON_BENCH_PG_DSN as for jobs_pg).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx
from tests.ops.scenario import APP, figures, seed, truth
from tests.server.conftest import OPERATOR, live_server, operator_token

from bench._report import Row, row
from bench.jobs_pg_bench import fresh_database
from pigeon.ops.dashboard import dashboard_routes
from pigeon.ops.queries import overview
from pigeon.server.app import create_app
from pigeon.server.intake import Intake
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db

LOADS = 9
TARGET_MS = 200.0


def _median_ms(fn: Callable[[], Any], n: int = LOADS) -> float:
    fn()  # warm: connections, templates, plans
    times = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _raw_counts(db: Database) -> Callable[[], None]:
    """The raw limit: the page's counts by bare SQL, exact, in one read transaction."""
    p = (lambda k: f"%({k})s") if db.backend == "postgres" else (lambda k: f":{k}")

    def read() -> None:
        now = time.time()
        with db.transaction() as tx:
            tx.sql(
                "SELECT status, count(*) FROM pigeon_records "
                f"WHERE created_at >= {p('since')} GROUP BY status",
                {"since": now - 86400},
            ).fetchall()
            tx.sql(
                "SELECT name, status, count(*) FROM pigeon_obligations GROUP BY name, status", {}
            ).fetchall()
            tx.sql(
                "SELECT queue, status, count(*), min(scheduled_at) FROM pigeon_jobs "
                "GROUP BY queue, status",
                {},
            ).fetchall()
            tx.sql(
                "SELECT owner, queue, count(*) FROM pigeon_jobs WHERE status = 'failed' "
                "GROUP BY owner, queue",
                {},
            ).fetchall()

    return read


def _check_figures(db: Database) -> None:
    """The page's figures equal the database's own GROUP BYs (tests/ops/test_overview.py's
    comparison, at the benchmark's size)."""
    from tests.ops.test_overview import expected_figures

    now = time.time()
    found, want = figures(overview(db, APP, now=now)), expected_figures(truth(db, now, 86400))
    if found != want:
        wrong = {k: (found.get(k), want.get(k)) for k in found.keys() | want.keys()}
        raise AssertionError({k: v for k, v in wrong.items() if v[0] != v[1]})


def _page_ms(db: Database) -> tuple[float, float, str]:
    app = create_app(
        Intake(db), routes=dashboard_routes(db, APP), operator=operator_token(), purge_interval=None
    )
    with live_server(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        ms = _median_ms(lambda: client.get("/pigeon/", headers=OPERATOR).raise_for_status())
        text = client.get("/pigeon/", headers=OPERATOR).text  # after the clock: the labels
    raw = _median_ms(_raw_counts(db))
    return ms, raw, text


def _scenario_rows(quick: bool) -> list[Row]:
    import tempfile
    from pathlib import Path

    n = 2_000 if quick else 10_000
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = open_server_db(str(Path(tmp) / "ops.db"))
        seed(sqlite, n)
        _check_figures(sqlite)
        ms, raw, _ = _page_ms(sqlite)
        sqlite.close()
    rows.append(_row(f"ops page, {n:,} records x 3 obligations, SQLite", ms, raw, "report"))
    with fresh_database("ops") as url:
        pg = open_server_db(url)
        seed(pg, n)
        _vacuum(url)
        _check_figures(pg)
        ms, raw, _ = _page_ms(pg)
        pg.close()
    rows.append(_row(f"ops page, {n:,} records x 3 obligations, PostgreSQL", ms, raw, "report"))
    return rows


def _row(name: str, ms: float, raw: float, target: str, ok: bool = True) -> Row:
    return row(
        name,
        ms,
        raw,
        unit="ms",
        baseline_name="raw limit: the same counts by bare GROUP BYs, exact",
        target=target,
        ok=ok,
        higher_is_better=False,
    )


BULK = """
INSERT INTO pigeon_records (id, kind, data, status, created_at, completed_at, principal)
SELECT 'r' || g, 'answer', '{}',
       CASE WHEN g > %(n)s - 2100 OR g %% 200 = 0 OR g %% 500 = 0 THEN 'received'
            ELSE 'completed' END,
       %(now)s - (%(n)s - g) * %(spacing)s, NULL, 'u'
FROM generate_series(1, %(n)s) AS g;

INSERT INTO pigeon_jobs (id, queue, task, payload, status, attempts, max_attempts, created_at,
                         budget_start, scheduled_at, reserved_until, lease_token, worker,
                         started_at, finished_at, last_error, owner, record_id, obligation)
OVERRIDING SYSTEM VALUE
SELECT (g - 1) * 3 + k.i, k.name, 'do_' || k.name, '{}', s.status,
       CASE WHEN s.status = 'queued' THEN 0 ELSE 1 END, 5, c.at, c.at, c.at,
       CASE WHEN s.status = 'reserved' THEN
            CASE WHEN g %% 10 = 0 THEN %(now)s - 60 ELSE %(now)s + 600 END END,
       CASE WHEN s.status = 'reserved' THEN 't' END,
       CASE WHEN s.status <> 'queued' THEN 'w' END,
       CASE WHEN s.status <> 'queued' THEN c.at + 0.5 END,
       CASE WHEN s.status IN ('succeeded', 'failed') THEN c.at + 0.6 END,
       CASE WHEN s.status = 'failed' AND k.name = 'notify'
                THEN 'permanent error: pigeon.exceptions.PermanentError: mailbox gone'
            WHEN s.status = 'failed'
                THEN 'attempts exhausted (5 of 5); last error: app.ProviderDown: 503' END,
       CASE WHEN s.status = 'failed' THEN
            CASE WHEN k.name = 'notify' THEN 'comms-team' ELSE 'grading-team' END END,
       'r' || g, k.name
FROM generate_series(1, %(n)s) AS g
CROSS JOIN (VALUES (1, 'grading'), (2, 'notify'), (3, 'audit')) AS k (i, name)
CROSS JOIN LATERAL (SELECT %(now)s - (%(n)s - g) * %(spacing)s AS at) AS c
CROSS JOIN LATERAL (SELECT CASE
    WHEN g > %(n)s - 2000 THEN 'queued'
    WHEN g > %(n)s - 2100 THEN 'reserved'
    WHEN k.name = 'notify' AND g %% 200 = 0 THEN 'failed'
    WHEN k.name = 'grading' AND g %% 500 = 0 THEN 'failed'
    ELSE 'succeeded' END AS status) AS s;

INSERT INTO pigeon_obligations (record_id, name, job_id, status, updated_at)
SELECT record_id, obligation, id,
       CASE status WHEN 'queued' THEN 'pending' WHEN 'reserved' THEN 'pending'
                   WHEN 'failed' THEN 'failed' ELSE 'completed' END,
       created_at
FROM pigeon_jobs;

INSERT INTO pigeon_job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error)
SELECT id, 1, 'w', started_at, finished_at,
       CASE status WHEN 'succeeded' THEN 'succeeded' WHEN 'failed' THEN 'failed'
                   ELSE 'running' END,
       last_error
FROM pigeon_jobs WHERE status <> 'queued';

INSERT INTO pigeon_effects (scope, key, result, created_at)
SELECT 'grade', record_id, '1', finished_at FROM pigeon_jobs
WHERE queue = 'grading' AND status = 'succeeded';
"""


def _million_rows(quick: bool) -> list[Row]:
    n = 33_334 if quick else 333_334
    with fresh_database("ops1m") as url:
        db = open_server_db(url)
        with db.transaction() as tx:
            for statement in BULK.split(";\n"):
                if statement.strip():
                    tx.sql(
                        statement,
                        {"n": n, "now": time.time(), "spacing": 30 * 86400 / n},
                    )
        _vacuum(url)  # what autovacuum does after a bulk insert (statistics, visibility)
        with db.transaction() as tx:
            jobs = tx.sql("SELECT count(*) AS n FROM pigeon_jobs", {}).fetchone()["n"]
        ms, raw, text = _page_ms(db)
        db.close()
    estimated = "≈" in text
    how = "estimates past 10,000" if estimated else "exact"
    name = f"ops page at {jobs:,} jobs, PostgreSQL ({how})"
    return [_row(name, ms, raw, f"< {TARGET_MS:g} ms", ms < TARGET_MS)]


def _vacuum(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def run(quick: bool = False) -> list[Row]:
    return _scenario_rows(quick) + _million_rows(quick)

"""Task payload versions on the real databases: a database made before jobs carried a
version upgrades in place (its jobs are version 1, claimed and upcast like any other)."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pigeon.jobs.app import App
from pigeon.jobs.failed import show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.storage.queries import migrations
from pigeon.storage.schema import run_sqlite_script
from pigeon.storage.server import SERVER_APPLICATION_ID, open_server_db

BEFORE = 12  # the server schema's version before payload versions
OLD_JOB = (
    "INSERT INTO pigeon_jobs (queue, task, payload, status, max_attempts, created_at,"
    " budget_start, scheduled_at) VALUES ('q', 'tally', '{\"count\": 3, \"n\": 1}', 'queued',"
    " 5, 1.0, 1.0, 1.0)"
)


def _before_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for _, script in migrations("sqlite", "server")[:BEFORE]:
            run_sqlite_script(conn.execute, script)
        conn.execute(f"PRAGMA user_version = {BEFORE}")
        conn.execute(f"PRAGMA application_id = {SERVER_APPLICATION_ID}")
        conn.execute(OLD_JOB)
        conn.execute("COMMIT")
    finally:
        conn.close()


def _before_postgres(url: str) -> None:
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(b"pigeon-migrate"),))
        conn.execute(
            "CREATE TABLE pigeon_schema (component text PRIMARY KEY, version integer NOT NULL)"
        )
        for _, script in migrations("postgres", "server")[:BEFORE]:
            conn.execute(script.encode())
        conn.execute("INSERT INTO pigeon_schema VALUES ('server', %s)", (BEFORE,))
        conn.execute(OLD_JOB.encode())


def _tally_v2(ran: list[Any]) -> App:
    app = App()
    app.task(
        lambda n, quantity: ran.append((n, quantity)),
        queue="q", name="tally", fields=("n", "quantity"), version=2,
        upcast={1: lambda p: {"n": p["n"], "quantity": {"units": p["count"]}}},
    )  # fmt: skip
    return app


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_database_from_before_versions_upgrades_in_place(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "postgres":
        url: str = request.getfixturevalue("pg_url")
        _before_postgres(url)
    else:
        url = str(tmp_path / "server.db")
        _before_sqlite(tmp_path / "server.db")
    db = open_server_db(url)  # migrates past BEFORE
    try:
        assert show_job(db, 1)["version"] == 1  # every job before it has the first shape
        ran: list[Any] = []
        app = _tally_v2(ran)
        m = JobManager(db, app)
        new_id = m.enqueue(JobSpec("q", "tally", {"n": 2, "quantity": {"units": 5}}))
        assert show_job(db, new_id)["version"] == 2
        jobs = m.lease_jobs("q", "w", 10, lease=30)
        assert [(j.id, j.version) for j in jobs] == [(1, 1), (new_id, 2)]
        for job in jobs:
            app.tasks["tally"].before_run(db, job)
            app.tasks["tally"].func(**job.payload)
        assert m.finish([AttemptOutcome(j) for j in jobs]) == [True, True]
        assert ran == [(1, {"units": 3}), (2, {"units": 5})]
    finally:
        db.close()

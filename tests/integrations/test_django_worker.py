"""``manage.py pigeon_worker`` runs the jobs a Django view deferred, on the database of
Django's settings, with Django set up in each worker process (the task uses the ORM)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg

from pigeon.orphans import child_env
from tests import processes
from tests.integrations.django_notes import EXAMPLE, EXAMPLE_PATH, ROOT, DjangoNotes


def _state(db: str) -> tuple[str, str]:
    """The job's status and the note's clock (``indexed`` once the task ran)."""
    query = "SELECT (SELECT status FROM pigeon_jobs), (SELECT clock FROM notes_note)"
    if db.startswith("postgresql://"):
        with psycopg.connect(db) as conn:
            row = conn.execute(query).fetchone()
    else:
        with sqlite3.connect(db) as conn:
            row = conn.execute(query).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def test_the_worker_runs_the_deferred_job_with_the_orm(server_db_url: str) -> None:
    server = DjangoNotes(server_db_url).start()
    try:
        made = httpx.post(
            server.url + "/notes",
            json={"id": "n1"},
            headers={"Authorization": "Bearer ada.1", "Idempotency-Key": "k"},
        )
    finally:
        server.stop()
    assert made.status_code == 201 and _state(server_db_url)[0] == "queued"
    env = child_env() | {"NOTES_DB": server_db_url, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    args = [sys.executable, str(EXAMPLE / "manage.py"), "pigeon_worker"]
    worker = processes.spawn(
        [*args, "--queue", "notes=1", "--processes", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while _state(server_db_url) != ("succeeded", "indexed") and time.monotonic() < deadline:
            assert worker.poll() is None, worker.stdout.read() if worker.stdout else ""
            time.sleep(0.2)
        assert _state(server_db_url) == ("succeeded", "indexed")
    finally:
        processes.stop(worker)
    assert os.environ.get("DJANGO_SETTINGS_MODULE") is None


def test_pigeon_worker_on_another_database_than_the_projects_is_refused(tmp_path: Path) -> None:
    # pigeon worker --db names where the jobs are claimed; the project's views defer them in
    # its own databases: on any other, its jobs would never run.
    env = child_env() | {
        "PYTHONPATH": EXAMPLE_PATH,
        "DJANGO_SETTINGS_MODULE": "notes_project.settings",
        "PIGEON_DJANGO_JOBS_APP": "notes.jobs:app",
        "NOTES_DB": "postgresql://ada:hush@127.0.0.1:5432/notes",
    }
    args = [
        sys.executable,
        "-m",
        "pigeon",
        "worker",
        "--app",
        "pigeon.integrations.django.worker:app",
    ]
    done = processes.run(
        [*args, "--db", str(tmp_path / "jobs.db"), "--queue", "notes=1", "--processes", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "is none of the project's (default: postgresql://ada:***@" in " ".join(
        done.stderr.split()
    )
    assert "hush" not in done.stderr and "Traceback" not in done.stderr

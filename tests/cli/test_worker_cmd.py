"""``pigeon worker`` refuses what its workers could never use, before starting any of them.

Run as a subprocess with a timeout: a worker that is not refused supervises until it is
stopped, which would hang an in-process runner."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pigeon.cli import app
from pigeon.edge.queue import OfflineQueue
from pigeon.jobs import records
from pigeon.jobs.failed import list_jobs
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import JobManager
from pigeon.storage.server import open_server_db
from tests import processes
from tests.waiting import wait_for


def spawn_worker(
    *args: str, cwd: Path | None = None, flags: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    """``pigeon worker ARGS`` in its own session (so it can be killed with its workers),
    output in one pipe; ``flags`` for the interpreter."""
    return processes.spawn(
        [sys.executable, *flags, "-m", "pigeon", "worker", *args],
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def run_worker(*args: str, cwd: Path | None = None, timeout: float = 30) -> tuple[int, str]:
    """Exit code and output of ``pigeon worker ARGS``; one still running after ``timeout``
    seconds is killed with its worker processes (its own session) and the test fails."""
    proc = spawn_worker(*args, cwd=cwd)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        processes.stop(proc, grace=0)
        output, _ = proc.communicate()
        raise AssertionError(f"still running after {timeout} s:\n{output[-2000:]}") from None
    return proc.returncode, output


def assert_refused(code: int, output: str, *words: str) -> None:
    assert code == 2, output
    assert "Traceback" not in output and "exited with" not in output, output
    flat = " ".join(output.replace("│", " ").split())
    for word in words:
        assert word in flat, output


def test_worker_refuses_a_text_file(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    code, output = run_worker("--db", str(notes), "--queue", "grading=2")
    assert_refused(code, output, "notes.txt is not a SQLite database")
    assert notes.read_text() == "not a database\n"


def test_worker_refuses_an_edge_queue_file(tmp_path: Path) -> None:
    path = tmp_path / "edge.db"
    OfflineQueue(path).close()
    code, output = run_worker("--db", str(path), "--queue", "grading=2")
    assert_refused(code, output, "edge.db is not a pigeon server database")


def test_worker_refuses_a_missing_file_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nothere.db"
    code, output = run_worker("--db", str(missing), "--queue", "grading=2")
    assert_refused(code, output, "nothere.db: no such database file")
    assert list(tmp_path.iterdir()) == []


def test_worker_checks_options_before_the_database(tmp_path: Path) -> None:
    # a bad option is named as such even when the database is wrong too
    code, output = run_worker("--db", str(tmp_path / "nothere.db"), "--queue", "grading")
    assert_refused(code, output, "NAME=MAX or NAME=MIN:MAX")


def wait_until_succeeded(
    path: Path, count: int, proc: subprocess.Popen[str], timeout: float = 30.0
) -> None:
    """Until ``count`` jobs succeeded; fails at once if the worker command exits."""
    with contextlib.closing(open_server_db(path)) as db:

        def succeeded() -> bool:
            assert proc.poll() is None, proc.communicate()[0]
            return len(list_jobs(db, status="succeeded")) >= count

        wait_for(succeeded, timeout, lambda: f"{count} succeeded: {list_jobs(db)}", 0.05)


def test_worker_runs_jobs_of_an_existing_server_db(tmp_path: Path) -> None:
    path = tmp_path / "server.db"
    db = open_server_db(path)
    with db.transaction() as tx:  # the demo app's grader reads the answer from its record
        records.accept(
            tx,
            kind="answer",
            data={"answer": "42"},
            record_id="a1",
            obligations={"grading": JobSpec("grading", "grade", {"answer_id": "a1"})},
        )
    db.close()
    proc = processes.spawn(
        [sys.executable, "-m", "pigeon", "worker", "--db", str(path), "--queue", "grading=2"],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until_succeeded(path, 1, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    # The first line says whose jobs run, as pigeon serve's says whose app it serves.
    assert "pigeon worker: the reference app's jobs (--app module:attr" in output


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/pigeon"


def missing_database_url(pg_url: str) -> str:
    # the test's server and user, a database that does not exist there
    return pg_url.rsplit("/", 1)[0] + "/no_such_db_pigeon"


def test_worker_refuses_a_closed_postgres_port_at_once() -> None:
    started = time.monotonic()
    code, output = run_worker("--db", closed_port_url(), "--queue", "grading=2")
    assert_refused(code, output, "cannot connect to PostgreSQL", "Connection refused")
    assert time.monotonic() - started < 15
    assert "psycopg.pool" not in output and "pool initialization" not in output


def test_worker_refuses_a_missing_postgres_database_at_once(pg_url: str) -> None:
    started = time.monotonic()
    code, output = run_worker("--db", missing_database_url(pg_url), "--queue", "grading=2")
    assert_refused(code, output, 'database "no_such_db_pigeon" does not exist')
    assert time.monotonic() - started < 15
    assert "psycopg.pool" not in output and "pool initialization" not in output


def test_jobs_list_refuses_a_missing_postgres_database_at_once(pg_url: str) -> None:
    # the same helper opens --db for the jobs commands
    started = time.monotonic()
    result = CliRunner().invoke(
        app, ["jobs", "list", "--db", missing_database_url(pg_url)], env={"COLUMNS": "200"}
    )
    assert_refused(result.exit_code, result.output, 'database "no_such_db_pigeon" does not exist')
    assert time.monotonic() - started < 15


MYAPP = """
from pigeon import jobs

app = jobs.App()
app.queue("grading", min_workers=1, max_workers=4)


@app.task(queue="grading")
def grade(answer_id):
    pass
"""


def test_worker_imports_the_app_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(MYAPP)
    path = tmp_path / "server.db"
    db = open_server_db(path)
    JobManager(db).enqueue(JobSpec("grading", "grade", {"answer_id": "a1"}))
    db.close()
    # -P: no current directory on sys.path from the interpreter, as for the installed
    # `pigeon` script (`python -m` alone would put it there)
    args = ["--db", "server.db", "--app", "myapp:app", "--queue", "grading=2"]
    proc = spawn_worker(*args, cwd=tmp_path, flags=("-P",))
    try:
        wait_until_succeeded(path, 1, proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            processes.stop(proc, grace=0)
            raise
    assert proc.returncode == 0, output
    assert "No module named" not in output, output


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--recycle-jobs", "-1"], ["--recycle-jobs", "-1 is not in the range x>=1"]),
        (["--recycle-jobs", "0"], ["--recycle-jobs", "0 is not in the range x>=1"]),
        (["--recycle-mib", "-1"], ["--recycle-mib", "-1.0 is not in the range x>0"]),
        (["--recycle-mib", "0"], ["--recycle-mib", "0.0 is not in the range x>0"]),
        (["--recycle-mib", "nan"], ["--recycle-mib", "'nan' is not a finite number"]),
        (["--batch", "0"], ["--batch", "0 is not in the range x>=1"]),
        (["--prefetch", "0"], ["--prefetch", "0 is not in the range x>=1"]),
        (["--processes", "0"], ["--processes", "0 is not in the range x>=1"]),
    ],
)
def test_worker_refuses_non_positive_limits(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    path = tmp_path / "server.db"
    open_server_db(path).close()
    code, output = run_worker("--db", str(path), "--queue", "grading=2", *args)
    assert_refused(code, output, *words)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("grading=5:2", ["'grading=5:2': min 5 > max 2"]),
        ("grading=-1:2", ["'grading=-1:2': min -1 is negative"]),
        ("grading=0", ["'grading=0': max 0: at least 1 thread"]),
        ("grading=x", ["expected NAME=MAX or NAME=MIN:MAX threads, got 'grading=x'"]),
    ],
)
def test_worker_says_what_is_wrong_with_a_queue(
    tmp_path: Path, spec: str, words: list[str]
) -> None:
    path = tmp_path / "server.db"
    open_server_db(path).close()
    code, output = run_worker("--db", str(path), "--queue", spec)
    assert_refused(code, output, *words, "--queue")


def test_worker_refuses_a_queue_given_twice(tmp_path: Path) -> None:
    path = tmp_path / "server.db"
    open_server_db(path).close()
    code, output = run_worker("--db", str(path), "--queue", "grading=2", "--queue", "grading=4")
    assert_refused(code, output, "--queue", "queue 'grading' is given twice")


def test_worker_refuses_a_queue_the_app_does_not_have(tmp_path: Path) -> None:
    path = tmp_path / "server.db"
    open_server_db(path).close()
    code, output = run_worker("--db", str(path), "--queue", "grading=2", "--queue", "nope=2")
    assert_refused(
        code,
        output,
        "--queue",
        "pigeon.reference.jobs:app has no queue 'nope' (its queues: grading, notify)",
    )
    # the README's command, with an app that declares grading only
    (tmp_path / "myapp.py").write_text(MYAPP)
    args = [
        "--db",
        "server.db",
        "--app",
        "myapp:app",
        "--queue",
        "grading=2",
        "--queue",
        "notify=4",
    ]
    code, output = run_worker(*args, cwd=tmp_path)
    assert_refused(code, output, "--queue", "myapp:app has no queue 'notify' (its queues: grading)")


def test_jobs_stats_imports_the_app_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(MYAPP)
    open_server_db(tmp_path / "server.db").close()
    result = processes.run(
        [sys.executable, "-P", "-m", "pigeon", "jobs", "stats", "--db", "server.db",
         "--app", "myapp:app"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "grading" in result.stdout

"""Issue 21, items 1, 3 and 9, replayed against ``pigeon serve`` as deployed.

1. Request lines built to make the log redactor backtrack (``GET /notes?`` and 16,000
   characters: the redactor then held the event loop for minutes) arrive from several
   clients at once, without credentials, while the health probe is asked: it answers
   within 100 ms (19 times in 20, and never over a second: a loaded machine may not
   schedule the server for a moment; the redactor held the loop for seconds to minutes),
   and the access lines are written, cut short.
2. A handler that fails with the request's data in its exception's message (the
   ``--test-hooks`` fail switch quotes the Idempotency-Key, here a canary) answers 500
   with an error id and without the message; the log line has the id.
3. A job whose error quotes a password (recorded now, and recorded by an older version
   without redaction) shows it on no view: the page, the dashboard's JSON, the metrics,
   ``pigeon jobs failed``, a record's events.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pigeon.jobs import records
from pigeon.jobs.app import App
from pigeon.jobs.failed import show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import JobManager
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.stores import session_for
from pigeon.jobs.worker import Worker
from pigeon.storage.base import Database
from pigeon.storage.crypto import Keyring
from pigeon.storage.sealed import JOB_ERROR
from pigeon.storage.server import open_server_db
from tests import processes
from tests.waiting import wait_for

from .conftest import PIGEON, Deployed, serve, stop

HEALTH = "/pigeon/v1/health"
TARGET = 16_000  # characters after "?": the request head stays under h11's 16 KiB
# Shapes that backtracked or rescanned in some pattern (tests/test_hostile_input.py).
SHAPES = ("a", "=", "a=&", "token", "tokena", "%", '"', 'password="\\"', "ap")
CLIENTS = 4


# The clients, in a process of their own (in this one their threads would hold the
# interpreter and slow the probe's client, not the server), on raw sockets: the request
# line arrives byte for byte as written, as an attacker would send it.
FLOOD = """
import socket, sys, threading
host, port, clients, *shapes = sys.argv[1:]
def flood(k):
    while True:
        for shape in shapes[k:] + shapes[:k]:
            target = (shape * (TARGET // len(shape) + 1))[:TARGET]
            head = f"GET /notes?{target} HTTP/1.1\\r\\nHost: h\\r\\nConnection: close\\r\\n\\r\\n"
            with socket.create_connection((host, int(port))) as s:
                s.sendall(head.encode())
                while s.recv(65536):
                    pass
for k in range(int(clients)):
    threading.Thread(target=flood, args=(k,), daemon=True).start()
threading.Event().wait()
"""


def test_the_health_probe_answers_while_hostile_request_lines_arrive(
    deployed: Deployed,
) -> None:
    script = FLOOD.replace("TARGET", str(TARGET))
    where = httpx.URL(deployed.url)
    args = [sys.executable, "-c", script, str(where.host), str(where.port), str(CLIENTS), *SHAPES]
    flood = processes.spawn(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    waits: list[float] = []
    try:
        time.sleep(1)  # under way
        with httpx.Client(timeout=30) as client:
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                started = time.perf_counter()
                assert client.get(deployed.url + HEALTH).status_code == 200
                waits.append(time.perf_counter() - started)
                time.sleep(0.02)
    finally:
        processes.stop(flood)
    arrived = deployed.log.read_text().count("GET /notes?")
    assert arrived >= 2 * len(SHAPES), arrived  # they did arrive meanwhile, every shape
    waits.sort()
    assert waits[int(0.95 * len(waits))] < 0.1 and waits[-1] < 1.0, waits[-5:]
    assert "more characters]" in deployed.log.read_text()  # logged, and cut short


# -- 5xx answers -----------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def with_hooks(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deployed]:
    """The deployment with ``--test-hooks`` (and its second key in the environment): a
    handler can be made to fail from outside."""
    monkeypatch.setenv("PIGEON_TEST_HOOKS", "1")
    if request.param == "postgres":
        db: str = request.getfixturevalue("pg_url")
    else:
        db = str(tmp_path / "server.db")
    proc, url, log = serve(db, tmp_path, "--test-hooks")
    try:
        yield Deployed(url=url, backend=request.param, db=db, log=log)
    finally:
        stop(proc)


def test_a_failing_handler_answers_an_error_id_and_not_its_message(with_hooks: Deployed) -> None:
    canary = "canary-" + uuid.uuid4().hex
    headers = with_hooks.user("ada") | {"Idempotency-Key": canary, "X-Pigeon-Test-Fail": "1"}
    reply = httpx.post(with_hooks.url + "/notes", json={"id": "n1", "body": "b"}, headers=headers)
    assert reply.status_code == 500
    body = reply.json()
    assert body["type"].endswith("handler-failed") and body["error_id"] in body["detail"]
    assert canary not in reply.text and "RuntimeError" not in reply.text
    line = f"[error {body['error_id']}]"  # written after the answer
    wait_for(lambda: line in with_hooks.log.read_text(), 10, "the error's line in the log")
    assert canary not in with_hooks.log.read_text()


# -- job errors on every view ----------------------------------------------------------


def passwords() -> tuple[str, str]:
    # Short: an error shown whole in one cell of the CLI's table, never folded across lines
    # (a folded secret would not be found in the output whether it was hidden or not).
    return "hunter2-" + uuid.uuid4().hex[:8], "hunter3-" + uuid.uuid4().hex[:8]


def fail_a_job(db: Database, secret: str) -> int:
    app = App(retention=None)
    app.queue("billing", owner="billing-team")

    @app.task(queue="billing", max_attempts=1)
    def charge() -> None:
        raise RuntimeError(f"refused: password={secret} u=ada")

    job_id = JobManager(db, app).enqueue(JobSpec("billing", "charge", {}))
    worker = Worker(app, db, {"billing": 1}, WorkerOptions(poll=0.01, schedules=False))
    worker.start()
    try:
        wait_for(
            lambda: show_job(db, job_id)["status"] == "failed",
            30,
            lambda: f"the job to fail: {show_job(db, job_id)}",
        )
    finally:
        worker.stop()
        worker.join(10)
    return job_id


def record_an_old_error(db: Database, job_id: int, secret: str, backend: str) -> None:
    """The job's error as a version before redaction recorded it: in clear text."""
    with db.transaction() as tx:
        error = f"permanent error: login password={secret}"
        sealed = tx.cipher.seal(error, *JOB_ERROR.ad, str(job_id))
        e, i = ("%(e)s", "%(id)s") if backend == "postgres" else (":e", ":id")
        statement = f"UPDATE pigeon_jobs SET last_error = {e} WHERE id = {i}"
        tx.sql(statement, {"e": sealed, "id": job_id})


def test_a_password_in_a_job_error_is_on_no_view(deployed: Deployed, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"  # the deployment's: errors are sealed at rest
    db = open_server_db(deployed.db, keyring=Keyring.from_file(keys))
    new, old = passwords()
    try:
        fail_a_job(db, new)
        record_an_old_error(db, fail_a_job(db, "x"), old, deployed.backend)
    finally:
        db.close()
    views = {
        path: httpx.get(deployed.url + path, headers=deployed.operator)
        for path in ("/pigeon/", "/pigeon/v1/dashboard", "/metrics")
    }
    env = os.environ | {"PIGEON_KEYS_FILE": str(keys), "COLUMNS": "300"}
    cli = processes.run(
        [*PIGEON, "jobs", "failed", "--db", deployed.db],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    for path, reply in views.items():
        assert reply.status_code == 200, (path, reply.text[:300])
        assert new not in reply.text and old not in reply.text, path
    assert "[redacted]" in views["/pigeon/v1/dashboard"].text
    assert "refused: password=[redacted] u=ada" in views["/pigeon/v1/dashboard"].text
    assert new not in cli.stdout and old not in cli.stdout
    assert "password=[redacted] u=ada" in cli.stdout  # shown, one line, hidden
    assert "login password=[redacted]" in cli.stdout


def test_a_password_in_a_records_events_is_not_served(deployed: Deployed, tmp_path: Path) -> None:
    """A record's events quote its job's errors (an attempt's, a failed obligation's):
    one written by an older version, in clear text, is served redacted."""
    _, old = passwords()
    db = open_server_db(deployed.db, keyring=Keyring.from_file(tmp_path / "keys.json"))
    try:
        with db.transaction() as tx:
            record_id = records.accept(tx, kind="order", data={"n": 1})
            detail = {"job_id": 1, "error": f"RuntimeError: login password={old}"}
            session_for(tx).ledger_event(record_id, "charge", "attempt", detail, time.time())
    finally:
        db.close()
    reply = httpx.get(f"{deployed.url}/pigeon/v1/records/{record_id}", headers=deployed.operator)
    assert reply.status_code == 200, reply.text
    assert old not in reply.text and "login password=[redacted]" in reply.text

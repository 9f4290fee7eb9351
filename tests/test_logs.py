"""Logs: structured (``--log-format json``), redacted, and never holding a payload or a token.

A canary secret goes through every path that could carry it to a log — the intake (one
operation and a batch, in bodies, headers and a query string), a failing job whose error
quotes it, an alert hook and an outbox publisher whose exceptions quote it, a dead letter
on the edge, the failed store and the CLI that shows it — and must appear in no log
record (caplog, formatted as pytest formats it: exception messages included) and in no
line a ``pigeon serve`` / ``pigeon worker`` process writes to stderr. On both backends.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from pigeon.cli import app as cli
from pigeon.edge.queue import OfflineQueue
from pigeon.exceptions import StoreUnavailable
from pigeon.jobs import outbox
from pigeon.jobs.app import App
from pigeon.jobs.failed import FailedStore, list_jobs, show_job
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import JobManager
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.relay import CallablePublisher, Message, Relay
from pigeon.jobs.worker import Worker
from pigeon.logs import REDACTED, JsonFormatter, Redactor, TextFormatter, dict_config, summary
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.reference.notes import create_notes_app
from pigeon.server.app import create_app
from pigeon.server.intake import Intake, IntakeContext, OperationRequest
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db
from pigeon.sync.engine import SyncEngine
from tests import processes
from tests.server.conftest import live_server
from tests.waiting import until_answers

CANARY = "canary-" + uuid.uuid4().hex  # a value that can only come from this test


# -- the redactor and the formatters ---------------------------------------------------


def record(msg: str, *args: Any, exc: BaseException | None = None, **extra: Any) -> Any:
    rec = logging.LogRecord("pigeon.test", logging.WARNING, __file__, 1, msg, args, None)
    if exc is not None:
        rec.exc_info = (type(exc), exc, exc.__traceback__)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_the_redaction_list_hides_fields_at_any_depth_and_in_text() -> None:
    r = Redactor(["ssn"])
    assert r.value({"Authorization": "x", "n": {"operator_token": "y", "ssn": "z", "id": 1}}) == {
        "Authorization": REDACTED,
        "n": {"operator_token": REDACTED, "ssn": REDACTED, "id": 1},
    }
    assert r.value({"payload": {"title": CANARY}, "body": CANARY}) == {
        "payload": REDACTED,
        "body": REDACTED,
    }
    text = r.text(
        f"GET /x?token={CANARY}&limit=5 Authorization: Bearer {CANARY} "
        f'password={CANARY} {{"secret": "{CANARY}", "n": 1}} ssn={CANARY}'
    )
    assert CANARY not in text and "limit=5" in text and '"n": 1' in text


def test_the_redaction_list_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not Redactor().hides("employee_id")
    assert Redactor(["employee_id"]).hides("Employee_ID")
    monkeypatch.setenv("PIGEON_LOG_REDACT", "employee_id, iban")
    assert Redactor().hides("employee_id") and Redactor().hides("IBAN")


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter()])
def test_formatters_redact_fields_messages_and_exception_messages(
    formatter: logging.Formatter,
) -> None:
    app_error = raised(RuntimeError(f"could not grade {CANARY}"))
    line = formatter.format(
        record("job %s failed: %s", 7, f"token={CANARY}", exc=app_error, payload={"a": CANARY})
    )
    assert CANARY not in line
    assert "RuntimeError" in line and "Traceback" in line  # type and frames are kept
    infra = formatter.format(record("x", exc=raised(StoreUnavailable("PostgreSQL down"))))
    assert "PostgreSQL down" in infra  # pigeon's own infrastructure messages are kept


def test_a_text_line_keeps_a_forged_line_on_its_own() -> None:
    line = TextFormatter().format(record("GET %s", "/x\r\n2026-01-01 ERROR forged"))
    assert "\n" not in line and "\\r\\n2026-01-01 ERROR forged" in line


def test_json_lines_carry_the_structured_fields() -> None:
    line = JsonFormatter().format(record("claimed %d", 3, job_id=12, queue="grading"))
    entry = json.loads(line)
    assert entry["message"] == "claimed 3" and entry["level"] == "warning"
    assert (entry["job_id"], entry["queue"], entry["logger"]) == (12, "grading", "pigeon.test")


def test_summary_names_the_type_of_an_application_error_only() -> None:
    assert summary(RuntimeError(CANARY)) == "RuntimeError"
    assert summary(StoreUnavailable("db down")) == "StoreUnavailable: db down"


def test_dict_config_refuses_an_unknown_format() -> None:
    from pigeon.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError):
        dict_config("xml")  # type: ignore[arg-type]


# -- the canary through every path, in process -----------------------------------------


def secret_body(note_id: str) -> dict[str, Any]:
    return {"id": note_id, "title": CANARY, "body": CANARY, "password": CANARY}


def send_through_the_intake(url: str) -> None:
    headers = {"Authorization": f"Bearer alice.{CANARY}", "Idempotency-Key": str(uuid.uuid4())}
    assert httpx.post(url + "/notes", json=secret_body("n1"), headers=headers).status_code < 300
    op = {
        "idempotency_key": str(uuid.uuid4()),
        "method": "POST",
        "path": "/notes",
        "body": secret_body("n2"),
    }
    reply = httpx.post(
        url + "/pigeon/v1/batch",
        json={"operations": [op]},
        headers={"Authorization": f"Bearer alice.{CANARY}"},
    )
    assert reply.status_code == 200, reply.text
    answer = {"question": CANARY, "answer": CANARY, "notify": f"{CANARY}@example.org"}
    headers["Idempotency-Key"] = str(uuid.uuid4())
    assert httpx.post(url + "/answers", json=answer, headers=headers).status_code == 202
    # Refused input that quotes the secret back: still no log line with it.
    bad = {"id": 5, "title": CANARY}
    headers["Idempotency-Key"] = str(uuid.uuid4())
    httpx.post(url + "/notes", json=bad, headers=headers)


def leaky_app() -> App:
    def alert(failed: Any) -> None:
        raise RuntimeError(f"pager down, could not send {CANARY}")

    app = App(retention=None, alert=alert)
    app.queue("leaky", owner="leak-team")

    @app.task(queue="leaky", max_attempts=1, fields=("record_id",))
    def leak(record_id: str) -> None:
        raise RuntimeError(f"could not process {record_id}: {CANARY}")

    return app


def fail_a_job(db: Database) -> int:
    app = leaky_app()
    job_id = JobManager(db, app).enqueue(JobSpec("leaky", "leak", {"record_id": "r1"}))
    worker = Worker(app, db, {"leaky": 1}, WorkerOptions(poll=0.01, schedules=False))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while show_job(db, job_id)["status"] != "failed":
            assert time.monotonic() < deadline, show_job(db, job_id)
            time.sleep(0.02)
    finally:
        worker.stop()
        worker.join(10)
    return job_id


def publish_a_secret(db: Database) -> None:
    with db.transaction() as tx:
        outbox.add(tx, "answers.received", {"answer": CANARY})

    def broker_down(message: Message) -> None:
        raise RuntimeError(f"rejected {message.payload}")

    assert Relay(db, CallablePublisher(broker_down)).run_once() == 0


def dead_letter_a_secret(path: Path) -> OfflineQueue:
    def refuse(ctx: IntakeContext) -> Any:
        return 422, {"detail": f"title {ctx.body.get('title')} is not allowed"}

    intake = Intake(open_server_db(path.with_suffix(".server.db")))
    intake.add_operation("POST", "/notes", refuse)
    queue = OfflineQueue(path)
    transport = InProcessTransport(
        create_app(intake, purge_interval=None), token=lambda: f"ada.{CANARY}"
    )
    engine = SyncEngine(queue, transport)
    queue.enqueue("create", "note:1", secret_body("1"))
    engine.flush(timeout=20)
    engine.close()
    transport.close()
    assert [op.entity for op in queue.dead_letters()] == ["note:1"]
    return queue


def test_the_canary_reaches_no_log_record_in_process(
    db: Database, server_db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="pigeon")  # all of pigeon's, and any warning
    with live_server(create_notes_app(db, purge_interval=None)) as url:
        send_through_the_intake(url)
    job_id = fail_a_job(db)
    publish_a_secret(db)
    queue = dead_letter_a_secret(tmp_path / "edge.db")
    queue.close()
    # The failed store keeps the error for its owner (encrypted at rest when a key is set):
    # only the logs must never have it.
    (failed,) = FailedStore(db).list(queue="leaky")
    assert failed["id"] == job_id and failed["owner"] == "leak-team"
    runner = CliRunner()
    for args in (
        ["jobs", "failed", "--db", server_db_url],
        ["jobs", "list", "--db", server_db_url],
        ["queue", "dead", "-f", str(tmp_path / "edge.db")],
    ):
        assert runner.invoke(cli, args).exit_code == 0
    assert "alert hook failed" in caplog.text  # the paths did log: without the secret
    assert "publishing outbox message" in caplog.text
    assert CANARY not in caplog.text
    for rec in caplog.records:  # every field of every record, exceptions included
        assert CANARY not in json.dumps(vars(rec), default=repr)


def test_a_handler_or_replay_hook_that_raises_with_the_canary_logs_only_its_type(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """The intake logs a failing handler and a failing replay hook: application code,
    whose exception message may quote the request's data."""
    caplog.set_level(logging.DEBUG, logger="pigeon")

    def leaky(ctx: IntakeContext) -> Any:
        raise RuntimeError(f"cannot store {ctx.body['title']}")

    def leaky_replay(tx: Any, stored: Any, info: Any) -> Any:
        raise RuntimeError(f"cannot refresh {info.body['title']}")

    intake = Intake(db)
    intake.add_operation("POST", "/leaky", leaky)
    intake.add_operation("POST", "/ok", lambda ctx: (200, {}), on_replay=leaky_replay)
    for path in ("/leaky", "/ok", "/ok"):  # the second /ok is a replay: its hook raises
        request = OperationRequest("POST", path, {"title": CANARY}, "k" + path, "op")
        assert intake.execute("p", request).status in (200, 500)
    assert "handler for POST /leaky failed" in caplog.text
    assert "replay hook failed" in caplog.text
    assert CANARY not in caplog.text
    for rec in caplog.records:
        assert CANARY not in json.dumps(vars(rec), default=repr)


# -- the canary through pigeon serve and pigeon worker, JSON on stderr -------------------


def json_lines(stderr: str) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert entries, "nothing was logged"
    return entries


def test_serve_logs_json_lines_without_the_canary(server_db_url: str, tmp_path: Path) -> None:
    db = server_db_url if "://" in server_db_url else str(tmp_path / "serve.db")
    proc = processes.spawn(
        [sys.executable, "-m", "pigeon", "serve", "--db", db, "--port", "0",
         "--log-format", "json", "--log-level", "info", "--log-redact", "title"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("pigeon serving on http://"), line
        url = line.split()[3]
        until_answers(url + "/pigeon/v1/health", proc=proc)
        send_through_the_intake(url)
        httpx.get(url + f"/pigeon/v1/records/nope?token={CANARY}&api_key={CANARY}")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    entries = json_lines(stderr)
    assert any(e["logger"] == "uvicorn.access" for e in entries)  # requests were logged
    assert any("token=[redacted]" in e["message"] for e in entries)
    assert CANARY not in stderr


def test_worker_logs_json_lines_without_the_canary(server_db_url: str, tmp_path: Path) -> None:
    (tmp_path / "leakyapp.py").write_text(
        textwrap.dedent(
            """
            from tests.test_logs import leaky_app

            app = leaky_app()
            """
        )
    )
    db = server_db_url if "://" in server_db_url else str(tmp_path / "work.db")
    database = open_server_db(db)
    try:
        job_id = JobManager(database, leaky_app()).enqueue(
            JobSpec("leaky", "leak", {"record_id": "r1"})
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])}
        proc = processes.spawn(
            [sys.executable, "-m", "pigeon", "worker", "--db", db, "--app", "leakyapp:app",
             "--queue", "leaky=1", "--processes", "1", "--log-format", "json"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while show_job(database, job_id)["status"] != "failed":
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.1)
            time.sleep(0.5)  # the alert hook runs after the commit
        finally:
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=60)
        assert list_jobs(database, status="failed")[0]["owner"] == "leak-team"
    finally:
        database.close()
    entries = json_lines(stderr)
    hook = [e for e in entries if "alert hook failed" in e["message"]]
    assert hook and "RuntimeError: [message not logged]" in hook[0]["exception"]
    assert CANARY not in stderr

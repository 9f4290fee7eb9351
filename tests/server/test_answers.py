"""Durable acceptance through the intake: record + obligations + jobs + outbox in ONE
transaction with the idempotency claim, answered 202 "received; pending", completed later
by a real worker. Runs on both backends."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from pigeon.jobs import outbox, records
from pigeon.jobs.demo import app as demo_app
from pigeon.jobs.job import JobSpec
from pigeon.jobs.worker import Worker
from pigeon.server.app import create_app
from pigeon.server.intake import Intake, IntakeContext
from pigeon.server.notes import create_notes_app
from pigeon.storage.base import Database
from tests.server.conftest import live_server

ANSWER = {"question": "2+2?", "answer": "4", "expected": "4", "notify": "ada@example.org"}


def _count(db: Database, name: str, column: str = "n", **params: Any) -> int:
    with db.transaction() as tx:
        rows = tx.fetchall(name, params)
    return sum(int(r[column] or 0) for r in rows)


def _jobs(db: Database) -> int:
    with db.transaction() as tx:
        return len(tx.fetchall("job_list", {"status": None, "queue": None, "limit": 10_000}))


def _post(url: str, key: str, body: Any) -> httpx.Response:
    return httpx.post(url + "/answers", json=body, headers={"Idempotency-Key": key}, timeout=10)


def test_received_then_completed_by_a_worker_and_replays_never_redo(db: Database) -> None:
    app = create_notes_app(db, purge_interval=None)
    key = str(uuid.uuid4())
    with live_server(app) as url:
        first = _post(url, key, ANSWER)
        assert first.status_code == 202
        body = first.json()
        assert body["status"] == "received"
        assert body["pending"] == ["grading", "notify"]
        assert first.headers["location"] == f"/pigeon/v1/records/{body['record']}"
        # Acceptance is visible and honest: nothing graded yet, both obligations pending.
        view = httpx.get(url + first.headers["location"]).json()
        assert view["status"] == "received"
        assert view["pending"] == ["grading", "notify"]
        assert _jobs(db) == 2
        assert _count(db, "outbox_counts", "pending") == 1

        replay = _post(url, key, ANSWER)
        assert replay.status_code == 202
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.json() == body
        assert _jobs(db) == 2  # no second record, no second set of jobs

        worker = Worker(demo_app, db, {"grading": 1, "notify": 1}, poll=0.01, schedules=False)
        worker.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                view = httpx.get(url + first.headers["location"]).json()
                if view["status"] == "completed":
                    break
                time.sleep(0.05)
        finally:
            worker.stop()
            worker.join(10)
        assert view["status"] == "completed", view
        assert view["pending"] == []
        assert {o["status"] for o in view["obligations"].values()} == {"completed"}
        states = [e["state"] for e in view["events"]]
        assert states[0] == "accepted" and states[-1] == "completed"

        again = _post(url, key, ANSWER)  # long after completion: still a replay, not a redo
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["record"] == body["record"]
        assert _jobs(db) == 2
        assert records.get(db, body["record"])["status"] == "completed"


def test_invalid_answer_is_refused_and_nothing_is_stored(db: Database) -> None:
    app = create_notes_app(db, purge_interval=None)
    with live_server(app) as url:
        reply = _post(url, str(uuid.uuid4()), {"question": "", "answer": "4"})
        assert reply.status_code == 422
        assert "'question'" in reply.json()["detail"]
    assert _jobs(db) == 0
    assert _count(db, "rec_counts") == 0


def test_handler_failing_after_the_claim_leaves_no_record_job_or_outbox_row(
    db: Database,
) -> None:
    calls = {"n": 0}

    def flaky(ctx: IntakeContext) -> Any:
        calls["n"] += 1
        spec = JobSpec("grading", "grade", {"answer_id": "x", "answer": "4"})
        rid = records.accept(ctx.tx, kind="answer", data=ctx.body, obligations={"grading": spec})
        outbox.add(ctx.tx, "answers.received", {"record": rid})
        if calls["n"] == 1:
            raise RuntimeError("crashed after writing the record, its job and its message")
        return 202, {"status": "received", "record": rid, "pending": ["grading"]}

    intake = Intake(db)
    intake.add_operation("POST", "/answers", flaky)
    key = str(uuid.uuid4())
    with live_server(create_app(intake, purge_interval=None)) as url:
        assert _post(url, key, ANSWER).status_code == 500
        assert (_jobs(db), _count(db, "rec_counts")) == (0, 0)
        assert _count(db, "outbox_counts", "pending") == 0
        # The claim was released with everything else: the retry runs, once.
        assert _post(url, key, ANSWER).status_code == 202
        assert _post(url, key, ANSWER).headers["idempotent-replayed"] == "true"
    assert (_jobs(db), _count(db, "rec_counts")) == (1, 1)
    assert _count(db, "outbox_counts", "pending") == 1

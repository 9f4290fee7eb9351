"""Durable acceptance through the intake: record + obligations + jobs + outbox in ONE
transaction with the idempotency claim, answered 202 "received; pending", completed later
by a real worker; replays answer the current state without re-running or touching the
stored claim. Runs on both backends."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest

from pigeon.jobs import outbox, records
from pigeon.jobs.failed import list_jobs
from pigeon.jobs.job import JobSpec
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.worker import Worker
from pigeon.reference.answers import ANSWERS_PATH, accept_answer, current_answer
from pigeon.reference.jobs import app as demo_app
from pigeon.reference.notes import create_notes_app
from pigeon.server.app import create_app
from pigeon.server.intake import ClaimMode, Intake, IntakeContext
from pigeon.server.options import IntakeOptions, ServerOptions
from pigeon.server.replay import ReplayInfo
from pigeon.storage.base import Database, Tx
from tests.server.conftest import live_server

ANSWER = {"question": "2+2?", "answer": "4", "expected": "4", "notify": "ada@example.org"}


def _count(notes_db: Database, name: str, column: str = "n", **params: Any) -> int:
    with notes_db.transaction() as tx:
        rows = tx.fetchall(name, params)
    return sum(int(r[column] or 0) for r in rows)


def _jobs(notes_db: Database) -> int:
    with notes_db.transaction() as tx:
        return len(tx.fetchall("job_list", {"status": None, "queue": None, "limit": 10_000}))


def _post(url: str, key: str, body: Any) -> httpx.Response:
    return httpx.post(url + "/answers", json=body, headers={"Idempotency-Key": key}, timeout=10)


def _in_batch(url: str, key: str, body: Any) -> dict[str, Any]:
    op = {"idempotency_key": key, "method": "POST", "path": "/answers", "body": body}
    reply = httpx.post(url + "/pigeon/v1/batch", json={"operations": [op]}, timeout=10)
    assert reply.status_code == 200, reply.text
    result: dict[str, Any] = reply.json()["results"][0]
    return result


def _stored(notes_db: Database, key: str) -> dict[str, Any] | None:
    with notes_db.transaction() as tx:
        return tx.fetchone("claim_get", {"principal": "anonymous", "idem_key": key})


def _work_until_completed(notes_db: Database, record: str) -> None:
    # One queue at a time: obligations of one record settled concurrently on PostgreSQL
    # can each miss the other's commit and leave the record "received" (reported to the
    # jobs owner); this test is about the intake's replays, not that race.
    for queue in records.get(notes_db, record)["pending"]:
        worker = Worker(demo_app, notes_db, {queue: 1}, WorkerOptions(poll=0.01, schedules=False))
        worker.start()
        try:
            deadline = time.monotonic() + 30
            while queue in records.get(notes_db, record)["pending"]:
                assert time.monotonic() < deadline, records.get(notes_db, record)
                time.sleep(0.02)
        finally:
            worker.stop()
            worker.join(10)
    assert records.get(notes_db, record)["status"] == "completed"


def test_received_then_completed_by_a_worker_and_replays_never_redo(notes_db: Database) -> None:
    app = create_notes_app(notes_db, purge_interval=None)
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
        assert _jobs(notes_db) == 2
        assert _count(notes_db, "outbox_counts", "pending") == 1

        replay = _post(url, key, ANSWER)
        assert replay.status_code == 202
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.json() == body
        assert _jobs(notes_db) == 2  # no second record, no second set of jobs

        _work_until_completed(notes_db, body["record"])
        view = httpx.get(url + first.headers["location"]).json()
        assert view["status"] == "completed", view
        assert view["pending"] == []
        assert {o["status"] for o in view["obligations"].values()} == {"completed"}
        states = [e["state"] for e in view["events"]]
        assert states[0] == "accepted" and states[-1] == "completed"

        stored = _stored(notes_db, key)
        again = _post(url, key, ANSWER)  # after completion: a replay of the current state
        assert again.status_code == 202
        assert again.headers["idempotent-replayed"] == "true"
        assert again.headers["location"] == first.headers["location"]
        assert again.json() == {"status": "completed", "record": body["record"], "pending": []}
        assert _jobs(notes_db) == 2
        assert records.get(notes_db, body["record"])["status"] == "completed"
        assert _stored(notes_db, key) == stored  # the claim and its stored 202 are untouched


@pytest.mark.parametrize("claim_mode", ["inline", "separate"])
def test_a_replay_answers_the_approved_current_state_in_every_mode_and_in_a_batch(
    notes_db: Database, claim_mode: ClaimMode
) -> None:
    options = ServerOptions(intake=IntakeOptions(claim_mode=claim_mode))
    app = create_notes_app(notes_db, options, purge_interval=None)
    single, batched = str(uuid.uuid4()), str(uuid.uuid4())
    quiet = {"question": "3+3?", "answer": "6"}  # grading only
    with live_server(app) as url:
        first = _post(url, single, ANSWER).json()
        via_batch = _in_batch(url, batched, quiet)
        assert via_batch["status"] == 202 and via_batch["body"]["pending"] == ["grading"]
        # Still received: the replay says so (the current state, not an invented grade).
        assert _in_batch(url, single, ANSWER)["body"] == first
        stored = {key: _stored(notes_db, key) for key in (single, batched)}

        _work_until_completed(notes_db, first["record"])
        _work_until_completed(notes_db, via_batch["body"]["record"])
        jobs = _jobs(notes_db)

        done = _post(url, batched, quiet)  # made in a batch, replayed alone
        assert (done.status_code, done.headers["idempotent-replayed"]) == (202, "true")
        assert done.json() == {
            "status": "completed",
            "record": via_batch["body"]["record"],
            "pending": [],
        }
        again = _in_batch(url, single, ANSWER)  # made alone, replayed in a batch
        assert (again["status"], again["replayed"]) == (202, True)
        assert again["headers"]["idempotent-replayed"] == "true"
        assert again["body"] == {"status": "completed", "record": first["record"], "pending": []}
        assert _jobs(notes_db) == jobs  # nothing accepted twice
        assert {key: _stored(notes_db, key) for key in (single, batched)} == stored


def test_a_replay_hook_cannot_write_and_its_failure_sends_the_stored_response(
    notes_db: Database,
) -> None:
    seen: list[ReplayInfo] = []

    def vandal(tx: Tx, stored: Any, info: ReplayInfo) -> Any:
        seen.append(info)
        # Would clear every stored response, were the database not refusing it.
        tx.fetchall("purge_responses", {"now": 1e12, "limit": 100})
        return {"status": "rewritten"}

    intake = Intake(notes_db)
    intake.add_operation("POST", ANSWERS_PATH, accept_answer, on_replay=vandal)
    with live_server(create_app(intake, purge_interval=None)) as url:
        first = _post(url, "k", ANSWER)
        stored = _stored(notes_db, "k")
        replay = _post(url, "k", ANSWER)
        assert (replay.status_code, replay.json()) == (202, first.json())
        assert _stored(notes_db, "k") == stored
        assert replay.headers["idempotent-replayed"] == "true"
        # The hook ran once, with what it needs to find the current state.
        [info] = seen
        assert (info.idempotency_key, info.method, info.path, info.status) == (
            "k",
            "POST",
            "/answers",
            202,
        )
        assert info.body == ANSWER
        # After the refused write the connection writes again (SQLite's query_only reset).
        assert _post(url, "k2", ANSWER).status_code == 202
        assert _post(url, "k", ANSWER).status_code == 202
    assert _count(notes_db, "rec_counts") == 2


def test_a_refusal_from_the_handler_is_not_stored_and_the_corrected_request_runs(
    notes_db: Database,
) -> None:
    # Registered without the declaration: the handler's own ValidationError frees the key.
    intake = Intake(notes_db)
    intake.add_operation("POST", ANSWERS_PATH, accept_answer, on_replay=current_answer)
    with live_server(create_app(intake, purge_interval=None)) as url:
        first = _post(url, "bad", {"question": "", "answer": "4"})
        again = _post(url, "bad", {"question": "", "answer": "4"})
        fixed = _post(url, "bad", ANSWER)
    assert (first.status_code, again.status_code) == (422, 422)
    assert "idempotent-replayed" not in again.headers
    assert fixed.status_code == 202, fixed.text
    assert _count(notes_db, "rec_counts") == 1


def test_invalid_answer_is_refused_and_nothing_is_stored(notes_db: Database) -> None:
    app = create_notes_app(notes_db, purge_interval=None)
    with live_server(app) as url:
        reply = _post(url, str(uuid.uuid4()), {"question": "", "answer": "4"})
        assert reply.status_code == 422
        assert "'question'" in reply.json()["detail"]
    assert _jobs(notes_db) == 0
    assert _count(notes_db, "rec_counts") == 0


def test_handler_failing_after_the_claim_leaves_no_record_job_or_outbox_row(
    notes_db: Database,
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

    intake = Intake(notes_db)
    intake.add_operation("POST", "/answers", flaky)
    key = str(uuid.uuid4())
    with live_server(create_app(intake, purge_interval=None)) as url:
        assert _post(url, key, ANSWER).status_code == 500
        assert (_jobs(notes_db), _count(notes_db, "rec_counts")) == (0, 0)
        assert _count(notes_db, "outbox_counts", "pending") == 0
        # The claim was released with everything else: the retry runs, once.
        assert _post(url, key, ANSWER).status_code == 202
        assert _post(url, key, ANSWER).headers["idempotent-replayed"] == "true"
    assert (_jobs(notes_db), _count(notes_db, "rec_counts")) == (1, 1)
    assert _count(notes_db, "outbox_counts", "pending") == 1


def test_answer_jobs_are_checked_against_the_job_app_and_take_its_retry_policy(
    notes_db: Database,
) -> None:
    # The app the workers run declares grading's retry policy: the job accepted with the
    # answer must carry it, and a task the app does not know is refused before anything
    # is accepted (not found out later by a worker, with the answer already "received").
    from pigeon.jobs.app import App
    from pigeon.reference.answers import add_answers

    jobs_app = App()
    jobs_app.queue("grading")
    jobs_app.queue("notify")

    @jobs_app.task(queue="grading", name="grade", max_attempts=3)
    def grade(answer_id: str) -> None:
        pass

    intake = Intake(notes_db)
    add_answers(intake, jobs_app)
    with live_server(create_app(intake, purge_interval=None)) as url:
        reply = _post(url, "k", {"question": "2+2?", "answer": "4", "expected": "4"})
        assert reply.status_code == 202, reply.text
        [job] = list_jobs(notes_db)
        assert (job["task"], job["max_attempts"]) == ("grade", 3)
        refused = _post(url, "k2", ANSWER)  # its "notify" task is not in the app
        # 500, naming no task (what failed is in the log, under the answer's error id)
        assert refused.status_code == 500 and refused.json()["type"].endswith("handler-failed")
        assert "send" not in refused.text and refused.json()["error_id"]
    assert _count(notes_db, "rec_counts") == 1 and len(list_jobs(notes_db)) == 1


def test_answer_jobs_carry_the_record_id_not_the_answer_or_the_address(notes_db: Database) -> None:
    """Minimal payloads: the jobs name the record; the answer, the expected answer and the
    e-mail address stay in it (the tasks re-read them), nowhere in the job table."""
    app = create_notes_app(notes_db, purge_interval=None)
    with live_server(app) as url:
        reply = _post(url, str(uuid.uuid4()), ANSWER)
        assert reply.status_code == 202, reply.text
        record = reply.json()["record"]
    jobs = list_jobs(notes_db)
    assert sorted(j["task"] for j in jobs) == ["grade", "send"]
    with notes_db.transaction() as tx:
        payloads = [r["payload"] for r in tx.sql("SELECT payload FROM pigeon_jobs").fetchall()]
    for payload in payloads:
        assert json.loads(payload) == {"answer_id": record}
        assert "ada@example.org" not in payload and "2+2?" not in payload
    _work_until_completed(notes_db, record)

"""Minimal, scoped job payloads: a task declares the fields its payload may carry (anything
else is refused at enqueue, naming the field, with nothing written) and an access re-check
that runs before the work (a job whose principal lost access fails for good, to its owner,
without running). Both backends."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from pigeon.exceptions import AccessRevoked, ConfigurationError, PayloadInvalid, PermanentError
from pigeon.jobs import access, records
from pigeon.jobs.app import App
from pigeon.jobs.failed import list_jobs, show_job
from pigeon.jobs.job import Job, JobSpec
from pigeon.jobs.manager import JobManager, enqueue
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.worker import Worker
from pigeon.reference.jobs import app as demo_app
from pigeon.storage.base import Database, Tx
from tests.clocks import FakeClock

Permanent = tuple[type[BaseException], ...]


def scoped_app(
    ran: list[dict[str, Any]], *, permanent: tuple[type[BaseException], ...] = ()
) -> App:
    app = App(retention=None, permanent=permanent)
    app.queue("mail", owner="comms-team")

    def still_allowed(tx: Tx, job: Job) -> str | None:
        reason = access.revoked(tx, job.payload["principal"])
        return None if reason is None else f"{job.payload['principal']} revoked: {reason}"

    @app.task(queue="mail", fields=("record_id", "principal"), access=still_allowed)
    def send(record_id: str, principal: str) -> None:
        ran.append({"record_id": record_id, "principal": principal})

    return app


def run_until_settled(app: App, db: Database, queue: str, job_ids: list[int]) -> None:
    worker = Worker(app, db, {queue: 1}, WorkerOptions(poll=0.01, schedules=False))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while any(show_job(db, j)["status"] not in ("succeeded", "failed") for j in job_ids):
            assert time.monotonic() < deadline, [show_job(db, j) for j in job_ids]
            time.sleep(0.02)
    finally:
        worker.stop()
        worker.join(10)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"record_id": "r1", "principal": "ada", "email": "ada@example.org"}, "'email'"),
        ({"record_id": "r1", "principal": "ada", "answer": "4", "body": {}}, "'answer', 'body'"),
    ],
)
def test_an_undeclared_field_is_refused_at_enqueue_naming_it(
    db: Database, clock: FakeClock, payload: dict[str, Any], field: str
) -> None:
    app = scoped_app([])
    with pytest.raises(PayloadInvalid, match=f"does not declare payload field {field}"):
        JobManager(db, app, clock=clock).enqueue(JobSpec("mail", "send", payload))
    with pytest.raises(PayloadInvalid, match="email"), db.transaction() as tx:
        records.accept(
            tx,
            kind="answer",
            data={},
            obligations={"mail": JobSpec("mail", "send", {**payload, "email": "x"})},
            app=app,
        )
    assert list_jobs(db) == []  # nothing written, the record neither
    with db.transaction() as tx:
        assert tx.fetchall("rec_counts", {}) == []


def test_declared_fields_are_checked_against_the_function() -> None:
    app = App()
    with pytest.raises(ConfigurationError, match="declares field 'email'"):

        @app.task(fields=("record_id", "email"))
        def one(record_id: str) -> None: ...

    with pytest.raises(ConfigurationError, match="parameter 'principal' has no default"):

        @app.task(fields=("record_id",))
        def two(record_id: str, principal: str) -> None: ...

    with pytest.raises(ConfigurationError, match="sequence of names"):

        @app.task(fields="record_id")
        def three(record_id: str) -> None: ...

    @app.task(fields=("record_id",), context=True)
    def four(ctx: Any, record_id: str, note: str = "") -> None: ...

    assert app.get_task("four").fields == {"record_id"}


def test_a_stored_job_with_an_undeclared_field_fails_permanently_without_running(
    db: Database,
) -> None:
    """A producer without the app cannot be checked at enqueue: the worker refuses the
    job before the task runs, for good."""
    ran: list[dict[str, Any]] = []
    app = scoped_app(ran, permanent=())  # permanent whatever the app lists
    with db.transaction() as tx:
        payload = {"record_id": "r", "principal": "ada", "email": "ada@example.org"}
        job_id = enqueue(tx, JobSpec("mail", "send", payload))
    run_until_settled(app, db, "mail", [job_id])
    job = show_job(db, job_id)
    assert (job["status"], job["attempts"], job["owner"]) == ("failed", 1, "comms-team")
    assert "does not declare payload field 'email'" in job["last_error"]
    assert ran == []


@pytest.mark.parametrize("permanent", [(PermanentError,), ()])
def test_a_job_whose_principal_lost_access_fails_for_good_to_its_owner(
    db: Database, permanent: Permanent
) -> None:
    """``permanent=()``: an app that lists no permanent errors still never retries it."""
    ran: list[dict[str, Any]] = []
    app = scoped_app(ran, permanent=permanent)
    manager = JobManager(db, app)
    kept = manager.enqueue(JobSpec("mail", "send", {"record_id": "r1", "principal": "ada"}))
    lost = manager.enqueue(JobSpec("mail", "send", {"record_id": "r2", "principal": "eve"}))
    with db.transaction() as tx:
        access.revoke(tx, "eve", reason="account closed")
    run_until_settled(app, db, "mail", [kept, lost])
    assert show_job(db, kept)["status"] == "succeeded"
    job = show_job(db, lost)
    assert (job["status"], job["attempts"], job["owner"]) == ("failed", 1, "comms-team")
    assert "eve revoked: account closed" in job["last_error"]
    assert AccessRevoked.__name__ in job["last_error"]
    assert ran == [{"record_id": "r1", "principal": "ada"}]  # the work never ran for eve


def test_revocation_is_by_exact_principal_and_can_be_restored(db: Database) -> None:
    with db.transaction() as tx:
        access.revoke(tx, "Eve", reason="first")
        access.revoke(tx, "Eve", reason="again")  # the latest reason wins
    with db.transaction() as tx:
        assert access.revoked(tx, "Eve") == "again"
        assert access.revoked(tx, "eve") is None  # no case folding
        access.restore(tx, "Eve")
    with db.transaction() as tx:
        assert access.revoked(tx, "Eve") is None


def _answer(db: Database, principal: str) -> str:
    """An answer as ``POST /answers`` records it: the data in the record, the id in the job."""
    rid = str(uuid.uuid4())
    data = {"question": "2+2?", "answer": "4", "expected": "4", "principal": principal}
    with db.transaction() as tx:
        records.accept(
            tx,
            kind="answer",
            data=data,
            obligations={"grading": JobSpec("grading", "grade", {"answer_id": rid})},
            record_id=rid,
            app=demo_app,
            principal=principal,
        )
    return rid


def test_the_reference_grader_rereads_the_record_and_rechecks_its_author(db: Database) -> None:
    ok, revoked = _answer(db, "ada"), _answer(db, "eve")
    with db.transaction() as tx:
        access.revoke(tx, "eve", reason="left the course")
    ids = [j["id"] for j in list_jobs(db)]
    assert len(ids) == 2
    run_until_settled(demo_app, db, "grading", ids)
    by_answer = {show_job(db, j)["payload"]["answer_id"]: show_job(db, j) for j in ids}
    assert by_answer[ok]["status"] == "succeeded"
    failed = by_answer[revoked]
    assert (failed["status"], failed["attempts"], failed["owner"]) == ("failed", 1, "grading-team")
    assert "principal 'eve' was revoked (left the course)" in failed["last_error"]
    with db.transaction() as tx:  # graded from the record, which the payload never held
        effects = tx.sql("SELECT key FROM pigeon_effects").fetchall()
    assert [e["key"] for e in effects] == [f"answer:{ok}"]

"""``GET /answers/{id}``: the answer, where its obligations stand, and its grade once a real
worker has run the grading job (none before: the grade is never invented). Its author and an
operator read it; anyone else gets the 404 of an answer that does not exist. Both backends."""

from __future__ import annotations

import time
from typing import Any

from pigeon.jobs import records
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.worker import Worker
from pigeon.reference.jobs import app as reference_jobs
from pigeon.reference.notes import create_notes_app
from pigeon.server.auth import BearerAuth
from pigeon.storage.base import Database
from tests.server.conftest import OPERATOR, TestClient, operator_token

ALICE = {"Authorization": "Bearer alice.1"}
BOB = {"Authorization": "Bearer bob.1"}


def grade_all(db: Database, ids: list[str]) -> None:
    """A real worker on the grading queue until no answer still owes its grade."""
    worker = Worker(reference_jobs, db, {"grading": 2}, WorkerOptions(poll=0.01, schedules=False))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while any("grading" in records.get(db, i)["pending"] for i in ids):
            assert time.monotonic() < deadline, [records.get(db, i) for i in ids]
            time.sleep(0.02)
    finally:
        worker.stop()
        worker.join(10)


def test_an_answer_shows_its_grade_once_graded(db: Database) -> None:
    app = create_notes_app(
        db, purge_interval=None, authenticate=BearerAuth(), operator=operator_token()
    )
    answers = {"right": ("4", 100), "wrong": ("5", 0)}
    with TestClient(app) as client:
        ids: dict[str, str] = {}
        for name, (answer, _) in answers.items():
            body = {"question": "2+2?", "answer": answer, "expected": "4"}
            reply = client.post("/answers", json=body, headers={**ALICE, "Idempotency-Key": name})
            assert reply.status_code == 202, reply.text
            ids[name] = reply.json()["record"]

        def read(name: str, who: dict[str, str] = ALICE) -> Any:
            return client.get(f"/answers/{ids[name]}", headers=who)

        before = read("right").json()
        assert before["status"] == "received" and before["pending"] == ["grading"]
        assert before["graded"] is False and before["grade"] is None
        assert before["question"] == "2+2?" and before["answer"] == "4"

        grade_all(db, list(ids.values()))

        for name, (_, score) in answers.items():
            after = read(name)
            assert after.status_code == 200, after.text
            body = after.json()
            assert body["graded"] is True and body["grade"] == score, body
            assert body["status"] == "completed" and body["pending"] == []
            assert read(name, OPERATOR).json()["grade"] == score  # an operator reads it too
            refused = read(name, BOB)  # another principal: the 404 of no such answer
            assert refused.status_code == 404
            assert refused.json()["detail"] == f"no record {ids[name]!r}"
        nothing = client.get("/answers/no-such-answer", headers=ALICE)
        assert nothing.status_code == 404
        assert nothing.json()["detail"] == "no record 'no-such-answer'"

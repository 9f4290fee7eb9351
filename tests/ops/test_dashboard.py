"""The 9 a.m. dashboard and /metrics on the reference app, through a real server, with
real records, obligations and jobs in the database (both backends)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pigeon.exceptions import PermanentError
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.reference.jobs import app as demo_jobs
from pigeon.reference.notes import create_notes_app
from pigeon.storage.base import Database
from tests.server.conftest import OPERATOR, live_server, operator_token


def _answer(url: str, notify: str | None) -> str:
    body: dict[str, Any] = {"question": "2+2?", "answer": "4", "expected": "4"}
    if notify:
        body["notify"] = notify
    reply = httpx.post(
        url + "/answers", json=body, headers={"Idempotency-Key": str(uuid.uuid4())}, timeout=10
    )
    assert reply.status_code == 202, reply.text
    record: str = reply.json()["record"]
    return record


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_dashboard_and_metrics_answer_the_nine_am_question(notes_db: Database) -> None:
    app = create_notes_app(notes_db, purge_interval=None, operator=operator_token())
    jobs = JobManager(notes_db, demo_jobs)
    with live_server(app) as url:
        for notify in ("ada@example.org", "bob@example.org", None):
            _answer(url, notify)
        graded = jobs.lease_jobs("grading", "w", 10, lease=30)
        assert len(graded) == 3
        assert jobs.finish([AttemptOutcome(j) for j in graded]) == [True] * 3
        (note,) = jobs.lease_jobs("notify", "w", 1, lease=30)
        jobs.finish([AttemptOutcome(note, PermanentError("mailbox does not exist"))])
        # two grading jobs that became ready two minutes ago: one is claimed by a worker
        # that dies (its lease runs out: stuck), one still waits (over the 60 s objective)
        past = JobManager(notes_db, demo_jobs, clock=lambda: time.time() - 120)
        past.enqueue(JobSpec("grading", "grade", {"answer_id": "x"}))
        past.enqueue(JobSpec("grading", "grade", {"answer_id": "y"}))
        jobs.lease_jobs("grading", "dead-worker", 1, lease=0.01)
        time.sleep(0.05)

        view = httpx.get(url + "/pigeon/v1/dashboard", headers=OPERATOR, timeout=10).json()
        metrics = httpx.get(url + "/metrics", headers=OPERATOR, timeout=10)

        assert view["records"] == {"received": 3, "completed": 1, "open": 2}
        assert view["obligations"]["grading"]["completed"] == 3
        notify_owed = dict(view["obligations"]["notify"])
        assert notify_owed.pop("oldest_owed_age") >= 0
        assert notify_owed == {
            "pending": 1,
            "in_progress": 0,
            "completed": 0,
            "failed": 1,
            "cancelled": 0,
            "owed": 2,
        }
        queues = {q["queue"]: q for q in view["queues"]}
        grading, notify = queues["grading"], queues["notify"]
        assert (grading["ready"], grading["reserved"], grading["stuck"]) == (1, 0, 1)
        assert 110 < grading["oldest_ready_age"] < 300 and grading["objective"] == 60
        assert grading["breach"] is True
        assert set(grading["service_time"]) == {"p50", "p90", "p99"}
        assert 0 <= grading["service_time"]["p50"] <= grading["service_time"]["p99"]
        assert (notify["ready"], notify["failed"], notify["breach"]) == (1, 1, False)
        assert notify["failed_owners"] == {"comms-team": 1}
        comms = view["failed_by_owner"]["comms-team"]
        assert comms["failed"] == 1 and "mailbox does not exist" in comms["recent"][0]["error"]

        assert metrics.status_code == 200
        assert metrics.headers["content-type"].startswith("text/plain")
        samples = _samples(metrics.text)
        assert samples["pigeon_records", (("status", "received"),)] == 3
        assert samples["pigeon_obligations", (("name", "notify"), ("status", "failed"))] == 1
        assert samples["pigeon_jobs", (("queue", "grading"), ("state", "stuck"))] == 1
        assert samples["pigeon_queue_freshness_breach", (("queue", "grading"),)] == 1
        assert samples["pigeon_queue_freshness_breach", (("queue", "notify"),)] == 0
        assert samples["pigeon_queue_oldest_ready_seconds", (("queue", "grading"),)] > 110
        assert samples["pigeon_failed_jobs", (("owner", "comms-team"),)] == 1
        assert ("pigeon_job_service_seconds", (("quantile", "0.99"), ("queue", "grading"))) in (
            samples
        )

        # computed at scrape time: the next scrape sees the next record
        _answer(url, None)
        again = _samples(httpx.get(url + "/metrics", headers=OPERATOR, timeout=10).text)
        assert again["pigeon_records", (("status", "received"),)] == 4

"""The jobs store's reads (queue stats, the freshness breach, the failed store, records,
the outbox's lag) through the policy modules, on each store: the in-memory one (the unit
tier, milliseconds) and, for the same scenario, SQLite and PostgreSQL, so the memory
store cannot drift from the SQL blocks it imitates."""

from __future__ import annotations

import random

import pytest

from pigeon.exceptions import InvalidOperation, NotFound, PermanentError
from pigeon.jobs import outbox, records
from pigeon.jobs.app import App
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.failed import FailedStore
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.jobs.relay import CallablePublisher, Message, Relay
from pigeon.jobs.stats import (
    FreshnessMonitor,
    RelayLag,
    failed_by_owner,
    open_breaches,
    queue_stats,
    relay_lag,
    service_times,
)
from pigeon.jobs.stores import BuiltinStore
from tests.clocks import FakeClock


def _app(**options: object) -> App:
    app = App(**options)  # type: ignore[arg-type]
    app.queue("grading", freshness=30, owner="graders", backoff=Backoff(base=1, cap=1))
    app.queue("idle", freshness=5)
    for name in ("old", "young", "later", "held", "stuck", "doomed"):
        app.task(lambda **_: None, queue="grading", name=name)
    return app


def test_queue_stats_service_times_and_failed_by_owner(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    app = _app()
    m = JobManager(any_store, app, clock=clock, rng=random.Random(1))
    m.enqueue(JobSpec("grading", "old"))
    clock.advance(10)
    m.enqueue(JobSpec("grading", "young"))
    m.enqueue(JobSpec("grading", "later", delay=3600))  # delayed: not ready, however old
    m.enqueue(JobSpec("grading", "held"))
    m.enqueue(JobSpec("grading", "stuck"))
    m.enqueue(JobSpec("grading", "doomed", max_attempts=1))
    clock.advance(5)
    (first,) = m.lease_jobs("grading", "w", 1, lease=60)
    held = m.lease_jobs("grading", "w", 3, lease=60)
    assert [j.task for j in held] == ["young", "held", "stuck"]
    m.finish([AttemptOutcome(held[0], PermanentError("bad answer"))])
    clock.advance(2.5)
    assert m.finish([AttemptOutcome(first)]) == [True]  # 2.5 s after it started
    clock.advance(58.5)
    m.renew([held[1]], lease=60)  # "stuck" keeps an expired lease
    stats, idle = queue_stats(any_store, app, now=clock())
    assert (stats.queue, idle.queue) == ("grading", "idle")
    counts = (stats.ready, stats.delayed, stats.reserved, stats.stuck, stats.succeeded)
    assert counts == (1, 1, 1, 1, 1)
    assert (stats.failed, stats.cancelled, stats.owners) == (1, 0, {"graders": 1})
    assert stats.oldest_ready_age == 66.0 and stats.breach  # "doomed", due 66 s ago
    assert (idle.ready, idle.oldest_ready_age, idle.breach, idle.objective) == (0, None, False, 5)
    assert service_times(any_store, "grading") == [2.5]
    assert service_times(any_store, "idle") == []
    owners = failed_by_owner(any_store)
    assert set(owners) == {"graders"}
    entry = owners["graders"]
    assert (entry["failed"], entry["queues"]) == (1, {"grading": 1})
    (recent,) = entry["recent"]
    assert (recent["task"], recent["attempts"], recent["record_id"]) == ("young", 1, None)
    assert "bad answer" in recent["error"]  # in clear: the store opened it


def test_the_breach_episode_opens_once_and_closes_when_fresh(
    any_store: BuiltinStore, clock: FakeClock
) -> None:
    alerts: list[tuple[str, float, float]] = []
    app = App(on_freshness_breach=lambda q, age, objective: alerts.append((q, age, objective)))
    app.queue("q", freshness=10)
    app.task(lambda: None, queue="q", name="t")
    m = JobManager(any_store, app, clock=clock)
    first, second = (FreshnessMonitor(app, any_store, clock=clock) for _ in range(2))
    m.enqueue(JobSpec("q", "t"))
    clock.advance(5)
    assert first.check(["q"]) == [] and open_breaches(any_store) == []
    clock.advance(10)
    assert first.check(["q"]) == ["q"] and second.check(["q"]) == []
    assert open_breaches(any_store) == [
        {"queue": "q", "since": clock(), "age": 15.0, "objective": 10.0}
    ]
    (job,) = m.lease_jobs("q", "w", 1, lease=60)
    m.finish([AttemptOutcome(job)])
    assert second.check(["q"]) == [] and open_breaches(any_store) == []
    assert alerts == [("q", 15.0, 10.0)]


def test_failed_store_reads_and_reviews(any_store: BuiltinStore, clock: FakeClock) -> None:
    app = _app()
    m = JobManager(any_store, app, clock=clock)
    job_id = m.enqueue(JobSpec("grading", "old", {"n": 1}, max_attempts=1))
    (job,) = m.lease_jobs("grading", "w", 1, lease=60)
    clock.advance(1)
    m.finish([AttemptOutcome(job, RuntimeError("boom"))])
    failed = FailedStore(any_store, clock=clock)
    (listed,) = failed.list()
    assert (listed["id"], listed["payload"], listed["owner"]) == (job_id, {"n": 1}, "graders")
    assert "boom" in listed["last_error"]
    shown = failed.show(job_id)
    assert [h["outcome"] for h in shown["history"]] == ["failed"]
    assert "boom" in shown["history"][0]["error"]
    failed.retry(job_id, reviewer="ada", reason="fixed the grader")
    assert failed.list() == []
    assert [r["reviewer"] for r in failed.show(job_id)["reviews"]] == ["ada"]
    assert queue_stats(any_store, app, now=clock())[0].ready == 1
    with pytest.raises(NotFound):
        failed.show(job_id + 1000)


def test_records_accept_and_get(any_store: BuiltinStore, clock: FakeClock) -> None:
    app = _app()
    with any_store.transaction() as session:
        rid = records.accept(
            session.tx,
            kind="answer",
            data={"text": "42"},
            obligations={"grading": JobSpec("grading", "old")},
            now=clock(),
            app=app,
            principal="ada",
        )
        with pytest.raises(InvalidOperation, match="a record needs a kind"):
            records.accept(session.tx, kind="", data={})
    view = records.get(any_store, rid, principal="ada")
    assert (view["data"], view["status"], view["pending"]) == (
        {"text": "42"},
        "received",
        ["grading"],
    )
    assert [e["state"] for e in view["events"]] == ["accepted"]
    assert view["events"][0]["detail"] == {"pending": ["grading"]}
    with pytest.raises(NotFound):
        records.get(any_store, rid, principal="eve")  # another's record: as if missing
    m = JobManager(any_store, app, clock=clock)
    (job,) = m.lease_jobs("grading", "w", 1, lease=60)
    clock.advance(1)
    m.finish([AttemptOutcome(job)])
    view = records.get(any_store, rid)
    assert (view["status"], view["completed_at"], view["pending"]) == ("completed", clock(), [])
    assert [e["state"] for e in view["events"]] == [
        "accepted",
        "attempt",
        "obligation_completed",
        "completed",
    ]


def test_the_outbox_lag_and_the_relay(any_store: BuiltinStore, clock: FakeClock) -> None:
    assert relay_lag(any_store, now=clock()) == RelayLag(0, None)
    with any_store.transaction() as session:
        for n in range(3):
            outbox.add(session.tx, "grades", {"n": n}, message_id=f"m{n}", now=clock())
    clock.advance(12)
    assert relay_lag(any_store, now=clock()) == RelayLag(3, 12.0)
    sent: list[Message] = []
    relay = Relay(any_store, CallablePublisher(sent.append), batch=2, retention=60, clock=clock)
    assert relay.drain() == 3
    assert [(m.id, m.payload) for m in sent] == [
        ("m0", {"n": 0}),
        ("m1", {"n": 1}),
        ("m2", {"n": 2}),
    ]
    assert relay_lag(any_store, now=clock()) == RelayLag(0, None)
    clock.advance(61)
    assert relay.purge(batch=2) == 3

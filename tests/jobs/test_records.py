from __future__ import annotations

import pytest

from pigeon.exceptions import InvalidOperation, NotFound
from pigeon.jobs import outbox, records
from pigeon.jobs.failed import list_jobs
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.storage.base import Database
from tests.clocks import FakeClock

OBLIGATIONS = {
    "grading": JobSpec("grading", "grade", {"answer": 1}),
    "notify": JobSpec("notify", "send", {"to": "ana"}),
}


def test_accept_then_each_state_is_recorded(db: Database, clock: FakeClock) -> None:
    with db.transaction() as tx:
        rid = records.accept(tx, kind="answer", data={"q": 7}, obligations=OBLIGATIONS, now=clock())
    view = records.get(db, rid)
    assert view["status"] == "received" and view["pending"] == ["grading", "notify"]
    m = JobManager(db, clock=clock)
    (grade,) = m.lease_jobs("grading", "w", 1, lease=5)
    m.finish([AttemptOutcome(grade, RuntimeError("flaky"))])
    clock.advance(10_000)
    (grade,) = m.lease_jobs("grading", "w", 1, lease=5)
    m.finish([AttemptOutcome(grade)])
    assert records.get(db, rid)["pending"] == ["notify"]
    (note,) = m.lease_jobs("notify", "w", 1, lease=5)
    m.finish([AttemptOutcome(note)])
    view = records.get(db, rid)
    assert view["status"] == "completed" and view["pending"] == []
    states = [(e["state"], e["obligation"]) for e in view["events"]]
    assert states == [
        ("accepted", None),
        ("attempt", "grading"),
        ("attempt", "grading"),
        ("obligation_completed", "grading"),
        ("attempt", "notify"),
        ("obligation_completed", "notify"),
        ("completed", None),
    ]
    assert view["events"][1]["detail"]["outcome"] == "error"


def test_rolled_back_intake_leaves_no_record_job_or_outbox_row(db: Database) -> None:
    with pytest.raises(RuntimeError), db.transaction() as tx:
        rid = records.accept(tx, kind="answer", data={}, obligations=OBLIGATIONS)
        outbox.add(tx, "answers", {"record": rid})
        raise RuntimeError("handler failed after the claim")
    assert list_jobs(db) == []
    with pytest.raises(NotFound):
        records.get(db, rid)
    with db.transaction() as tx:
        assert tx.fetchall("outbox_pending", {"limit": 10}) == []


def test_record_without_obligations_is_complete_at_once(db: Database) -> None:
    with db.transaction() as tx:
        rid = records.accept(tx, kind="ping", data=None)
    assert records.get(db, rid)["status"] == "completed"


def test_obligations_finishing_at_once_still_complete_the_record(db: Database) -> None:
    """Two workers settle the last two obligations concurrently: the record completes."""
    import threading
    import time

    from pigeon.jobs.ledger import settle_obligation

    with db.transaction() as tx:
        rid = records.accept(tx, kind="answer", data={}, obligations=OBLIGATIONS)
    first_settled = threading.Event()
    errors: list[BaseException] = []

    def settle(name: str, wait_for: threading.Event | None) -> None:
        try:
            if wait_for is not None:
                assert wait_for.wait(10)
            with db.transaction() as tx:
                settle_obligation(tx, rid, name, "completed", now=time.time())
                if wait_for is None:
                    first_settled.set()
                    time.sleep(0.3)  # hold the transaction open while the other settles
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    names = sorted(OBLIGATIONS)
    threads = [
        threading.Thread(target=settle, args=(names[0], None)),
        threading.Thread(target=settle, args=(names[1], first_settled)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors, errors
    assert records.get(db, rid)["status"] == "completed"


def test_an_obligation_cannot_share_a_unique_key(db: Database, clock: FakeClock) -> None:
    # Deduplicated, the second record's obligation would point at the first record's job
    # and stay pending forever: accept refuses it, before writing anything.
    spec = JobSpec("q", "notify", {"user": 1}, unique_key="notify:1")
    with db.transaction() as tx:
        first = records.accept(tx, kind="a", data={}, obligations={"n": spec}, now=clock())
    held = pytest.raises(InvalidOperation, match="'notify:1' is already held by job")
    # the transaction commits: even a caller that swallows the error stores nothing
    with db.transaction() as tx, held:
        records.accept(tx, kind="a", data={}, obligations={"n": spec}, record_id="second")
    fresh = JobSpec("q", "notify", {"user": 2}, unique_key="notify:2")
    shared = pytest.raises(InvalidOperation, match="share unique_key 'notify:2'")
    with db.transaction() as tx, shared:
        pair = {"x": fresh, "y": fresh}
        records.accept(tx, kind="a", data={}, obligations=pair, record_id="third")
    for refused in ("second", "third"):
        with pytest.raises(NotFound):
            records.get(db, refused)
    assert len(list_jobs(db)) == 1
    m = JobManager(db, clock=clock)
    (job,) = m.lease_jobs("q", "w", 10, lease=5)
    assert m.finish([AttemptOutcome(job)]) == [True]
    assert records.get(db, first)["status"] == "completed"

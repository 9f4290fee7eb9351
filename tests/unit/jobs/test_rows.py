"""The typed rows of the jobs store (``pigeon.jobs.rows``) are what each store returns:
every read of every session, on the memory, SQLite and PostgreSQL stores, gives exactly
the keys of its row type, each value of its declared type. The SQL sessions cast what the
driver returns to these types; this is the test that keeps the casts true."""

from __future__ import annotations

import types
import typing
from typing import Any

from pigeon.exceptions import PermanentError
from pigeon.jobs import outbox, records
from pigeon.jobs.app import App
from pigeon.jobs.failed import FailedStore
from pigeon.jobs.job import Job, JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.jobs.rows import (
    AttemptRow,
    Breach,
    EventRow,
    FailedCount,
    FailedRecent,
    JobRow,
    ObligationRow,
    OutboxLag,
    OutboxRow,
    Pressure,
    ProviderCall,
    QueueCounts,
    RecordRow,
    ReviewRow,
)
from pigeon.jobs.stores import BuiltinSession, BuiltinStore
from tests.clocks import FakeClock


def problems(kind: type, row: object) -> list[str]:
    """What in ``row`` is not a ``kind``: missing or extra keys, values of another type
    (an int where a float is declared is a number all the same)."""
    if not isinstance(row, dict):
        return [f"{kind.__name__}: not a row but {row!r}"]
    hints = typing.get_type_hints(kind)
    found = (
        [f"{kind.__name__}: keys {sorted(row)} != {sorted(hints)}"]
        if set(row) != set(hints)
        else []
    )
    for key, hint in hints.items():
        allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        allowed = tuple(type(None) if a is None else a for a in allowed)
        if float in allowed:
            allowed += (int,)
        if key in row and not isinstance(row[key], allowed):
            found.append(f"{kind.__name__}.{key}: {row[key]!r} is not {hint}")
    return found


def test_the_scan_can_fail() -> None:
    assert problems(Pressure, {"backlog": 1, "oldest_ready_at": None}) == []
    assert problems(Pressure, {"backlog": 1.5, "oldest_ready_at": 2}) != []
    assert problems(Pressure, {"backlog": 1}) != []
    assert problems(Pressure, None) != []


def _failed_job(store: BuiltinStore, clock: FakeClock) -> tuple[str, Job]:
    app = App()
    app.queue("q", owner="team")
    app.task(lambda **_: None, queue="q", name="t")
    with store.transaction() as session:
        obligations = {"o": JobSpec("q", "t", {"n": 1})}
        rid = records.accept(
            session.tx, kind="k", data={"a": 1}, obligations=obligations, now=clock()
        )
        outbox.add(session.tx, "topic", {"n": 1}, message_id="m1", now=clock())
        session.insert_provider_call(
            reference="r", provider="p", idempotency_key="key", request="{}", now=clock()
        )
        session.open_breach(queue="q", now=clock(), age=5.0, objective=1.0)
    manager = JobManager(store, app, clock=clock)
    (job,) = manager.lease_jobs("q", "w", 1, lease=60)
    clock.advance(1)
    assert manager.finish([AttemptOutcome(job, PermanentError("no"))]) == [True]
    return rid, job


def _reads(session: BuiltinSession, rid: str, job: Job, now: float) -> list[tuple[type, Any]]:
    return [
        (JobRow, session.get_job(job.id)),
        (JobRow, session.list_jobs(status="failed", queue=None, limit=5)[0]),
        (AttemptRow, session.attempts_of(job.id)[0]),
        (RecordRow, session.get_record(rid)),
        (ObligationRow, session.obligations_of(rid)[0]),
        (EventRow, session.events_of(rid)[0]),
        (Pressure, session.queue_pressure("q", now, 10)),
        (QueueCounts, session.queue_counts(now)[0]),
        (FailedCount, session.failed_counts()[0]),
        (FailedRecent, session.failed_recent(5)[0]),
        (OutboxRow, session.outbox_pending(5)[0]),
        (OutboxLag, session.outbox_lag()),
        (ProviderCall, session.provider_call("r")),
        (Breach, session.breaches()[0]),
    ]


def test_every_read_gives_its_row_type(any_store: BuiltinStore, clock: FakeClock) -> None:
    rid, job = _failed_job(any_store, clock)
    with any_store.reading() as session:
        found = _reads(session, rid, job, clock())
    FailedStore(any_store, clock=clock).cancel(job.id, reviewer="ada", reason="test")
    with any_store.reading() as session:
        found.append((ReviewRow, session.reviews_of(job.id)[0]))
    assert {kind for kind, _ in found} == {
        JobRow, AttemptRow, RecordRow, ObligationRow, EventRow, Pressure, QueueCounts,
        FailedCount, FailedRecent, OutboxRow, OutboxLag, ProviderCall, Breach, ReviewRow,
    }  # fmt: skip
    assert [p for kind, row in found for p in problems(kind, row)] == []

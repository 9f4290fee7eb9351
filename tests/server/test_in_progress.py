"""A duplicate of a request in progress: 409 + Retry-After, promptly, in every path
(single, group, batch), within one process and across processes (PostgreSQL)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.exceptions import ConfigurationError
from pigeon.reference.notes import create_note
from pigeon.reference.notes_reads import read_ledger
from pigeon.reference.schema import attach
from pigeon.server.inflight import Holder, InFlight
from pigeon.server.intake import ClaimMode, Intake, OperationRequest
from pigeon.server.options import IntakeOptions
from pigeon.server.results import OpResult
from pigeon.server.testhooks import BadTestHook, TestHooks
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db
from tests.databases import claim_held
from tests.waiting import wait_for

PROMPT = 1.0


def _ZERO() -> float:
    return 0.0


def op(key: str, note: str, delay_ms: int = 0) -> OperationRequest:
    hooks = TestHooks(delay_ms=delay_ms) if delay_ms else None
    return OperationRequest("POST", "/notes", {"id": note}, key, key, hooks=hooks)


def intake(notes_db: Database, claim_mode: ClaimMode = "inline") -> Intake:
    attach(notes_db)  # the reference app's tables, which create_note writes
    made = Intake(notes_db, IntakeOptions(claim_mode=claim_mode, test_hooks=True))
    made.add_operation("POST", "/notes", create_note)
    return made


def running(made: Intake, request: OperationRequest, on: str | None = None) -> Future[OpResult]:
    """``request`` in progress in ``made`` (held for its delay): once this process holds
    its key, or, with ``on`` (the database's URL), once another node would see it held."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(made.execute, "p", request)
    pool.shutdown(wait=False)
    if on is None:
        wait_for(lambda: made.inflight.held() > 0, 10, "the original to hold its key")
    else:
        wait_for(lambda: claim_held(on, request.key), 10, "the original to claim its key")
    return future


def timed(fn: object, *args: object) -> tuple[object, float]:
    started = time.monotonic()
    result = fn(*args)  # type: ignore[operator]
    return result, time.monotonic() - started


def in_progress(result: OpResult) -> bool:
    return result.status == 409 and "key-in-progress" in result.body_text and result.transient


# -- the registry, pure ------------------------------------------------------------------


@given(
    started=st.floats(0, 1e6),
    expected=st.floats(0, 1e4),
    elapsed=st.floats(0, 1e4),
)
def test_retry_after_is_whole_seconds_at_least_one_and_never_grows(
    started: float, expected: float, elapsed: float
) -> None:
    holder = Holder("op", started, lambda: expected, owner=None)
    now = started + elapsed
    assert holder.retry_after(now) >= 1
    assert holder.retry_after(now + 1) <= holder.retry_after(now)
    assert holder.retry_after(now) >= started + expected - now


def test_one_owner_may_hold_a_key_twice_and_another_may_not() -> None:
    flight, mine, theirs = InFlight(), object(), object()
    assert flight.enter(("p", "k"), mine, "a", _ZERO) is None
    assert flight.enter(("p", "k"), mine, "a", _ZERO) is None  # a batch naming it twice
    holder = flight.enter(("p", "k"), theirs, "b", _ZERO)
    assert holder is not None and holder.operation_id == "a"
    assert flight.enter(("q", "k"), theirs, "b", _ZERO) is None  # another principal's key
    flight.leave(("p", "k"), theirs)  # not the holder: no effect
    flight.leave(("p", "k"), mine)
    assert not holder.done.is_set()
    flight.leave(("p", "k"), mine)
    assert holder.done.is_set() and flight.enter(("p", "k"), theirs, "b", _ZERO) is None


@given(st.lists(st.floats(0, 100), min_size=1, max_size=20))
def test_the_expected_duration_stays_within_what_was_seen(seen: list[float]) -> None:
    flight = InFlight()
    for seconds in seen:
        flight.observe("/notes", seconds)
    mean = flight.measured("/notes")
    assert mean is not None and min(seen) - 1e-9 <= mean <= max(seen) + 1e-9


def test_hook_headers_are_parsed_or_refused_by_name() -> None:
    assert TestHooks.parse({}) is None
    assert TestHooks.parse({"X-Pigeon-Test-Delay-Ms": "250"}) == TestHooks(delay_ms=250)
    for headers in (
        {"X-Pigeon-Test-Delay-Ms": "-1"},
        {"X-Pigeon-Test-Delay-Ms": "999999999"},
        {"X-Pigeon-Test-Fail": "yes"},
        {"X-Pigeon-Test-Set-Cookie": "a\nb"},
    ):
        with pytest.raises(BadTestHook, match=next(iter(headers))):
            TestHooks.parse(headers)


def test_the_in_progress_wait_is_bounded(notes_db: Database) -> None:
    with pytest.raises(ConfigurationError, match="in_progress_wait"):
        IntakeOptions(in_progress_wait=31)


# -- one process -----------------------------------------------------------------------


@pytest.mark.parametrize("claim_mode", ["inline", "separate"])
def test_a_duplicate_in_this_process_is_answered_at_once(
    notes_db: Database, claim_mode: ClaimMode
) -> None:
    made = intake(notes_db, claim_mode)
    original = running(made, op("k", "n1", delay_ms=2000))
    result, took = timed(made.execute, "p", op("k", "n1"))
    assert isinstance(result, OpResult) and in_progress(result)
    assert took < 0.1
    assert dict(result.headers)["retry-after"] in ("1", "2")
    batch, took = timed(made.execute_batch, "p", [op("a", "a"), op("k", "n1"), op("b", "b")])
    assert isinstance(batch, list)
    assert [r.status for r in batch] == [201, 409]  # stopped at the busy key
    if notes_db.backend == "postgres":  # (SQLite: "a" itself waits for the one write lock)
        assert took < PROMPT
    assert original.result().status == 201
    assert sorted(r["idempotency_key"] for r in read_ledger(notes_db)) == ["a", "k"]


def test_the_same_key_twice_in_one_batch_replays_rather_than_waiting_on_itself(
    notes_db: Database,
) -> None:
    results = intake(notes_db).execute_batch("p", [op("k", "n1"), op("k", "n1")])
    assert [(r.status, r.replayed) for r in results] == [(201, False), (201, True)]


# -- across processes: two intakes on one PostgreSQL database ---------------------------


@pytest.fixture
def two_nodes(pg_url: str) -> Iterator[tuple[Intake, Intake, Database]]:
    first, second = open_server_db(pg_url), open_server_db(pg_url)
    try:
        yield intake(first), intake(second), first
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("claim_mode", ["inline", "separate"])
def test_a_duplicate_on_another_node_is_answered_within_the_claim_wait(
    pg_url: str, claim_mode: ClaimMode
) -> None:
    first, second = open_server_db(pg_url), open_server_db(pg_url)
    try:
        a, b = intake(first, claim_mode), intake(second, claim_mode)
        original = running(a, op("k", "n1", delay_ms=3000), on=pg_url)
        result, took = timed(b.execute, "p", op("k", "n1"))
        assert isinstance(result, OpResult) and in_progress(result), result
        assert took < PROMPT
        assert original.result().status == 201
        replay = b.execute("p", op("k", "n1"))
        assert replay.status == 201 and replay.replayed
        assert len(read_ledger(first)) == 1
    finally:
        first.close()
        second.close()


def test_a_batch_on_another_node_runs_what_precedes_a_busy_key(
    two_nodes: tuple[Intake, Intake, Database], pg_url: str
) -> None:
    a, b, notes_db = two_nodes
    original = running(a, op("k", "n1", delay_ms=3000), on=pg_url)
    batch, took = timed(b.execute_batch, "p", [op("x", "x"), op("k", "n1"), op("y", "y")])
    assert isinstance(batch, list)
    assert [r.status for r in batch] == [201, 409] and in_progress(batch[1])
    assert took < 2 * PROMPT  # one bounded wait, then the ops before it again
    group = b.execute_group([("p", op("z", "z")), ("p", op("k", "n1"))])
    assert [r.status for r in group] == [201, 409]
    assert original.result().status == 201
    assert sorted(r["idempotency_key"] for r in read_ledger(notes_db)) == ["k", "x", "z"]

"""Group commit: single-operation requests that arrive together share one transaction."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import uuid
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from pigeon.reference import schema as ref
from pigeon.reference.notes import create_note, create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.server.app import BATCHES_AT_ONCE, create_app
from pigeon.server.intake import Intake, IntakeContext, OperationRequest
from pigeon.server.options import IntakeOptions
from pigeon.storage.base import Database
from tests.clocks import FakeClock

from .conftest import CountingDatabase


def request(note: str, key: str | None = None, **fields: Any) -> OperationRequest:
    key = key or str(uuid.uuid4())
    return OperationRequest("POST", "/notes", {"id": note}, key, key, **fields)


def test_a_group_is_one_commit_and_each_answer_is_what_it_would_get_alone(
    notes_db: Database, server_clock: FakeClock
) -> None:
    counting = CountingDatabase(notes_db)
    intake = Intake(counting, now=server_clock)  # type: ignore[arg-type]
    calls = {"n": 0}

    def flaky(ctx: IntakeContext) -> Any:
        calls["n"] += 1
        if ctx.body["id"] == "boom":
            create_note(ctx)  # written, then the handler fails: must not survive
            raise RuntimeError("downstream broke")
        return create_note(ctx)

    intake.add_operation("POST", "/notes", flaky)
    results = intake.execute_group(
        [
            ("alice", request("1", "k1")),
            ("alice", request("1", "k1")),  # the same key again, in the same group
            ("alice", request("boom", "k2")),
            ("bob", request("1", "k1")),  # another principal's k1 is another key
            ("alice", request("2", "k3")),
        ]
    )
    assert counting.commits == 1
    assert [r.status for r in results] == [201, 201, 500, 201, 201]
    assert [r.replayed for r in results] == [False, True, False, False, False]
    assert results[1].body_text == results[0].body_text
    ledger = read_ledger(notes_db)
    assert sorted((row["principal"], row["entity"]) for row in ledger) == [
        ("alice", "note:1"),
        ("alice", "note:2"),
        ("bob", "note:1"),
    ]
    with notes_db.transaction() as tx:  # the failed one's key was given back: a retry runs
        assert intake.store.get(tx, "alice", "k2") is None
        assert ref.fetchone(tx, "note_get", {"principal": "alice", "id": "boom"}) is None


def test_a_group_that_breaks_is_applied_again_one_by_one(
    notes_db: Database, server_clock: FakeClock
) -> None:
    counting = CountingDatabase(notes_db)
    intake = Intake(counting, now=server_clock)  # type: ignore[arg-type]
    intake.add_operation("POST", "/notes", create_note)
    # A clock stamp that cannot be read fails outside any handler, inside the transaction.
    results = intake.execute_group(
        [("alice", request("1")), ("alice", request("2", clock="not-a-clock"))]
    )
    assert [r.status for r in results] == [201, 500]
    assert len(read_ledger(notes_db)) == 1  # the good one exactly once, the group's attempt undone
    assert counting.commits == 1  # the failed group committed nothing; the good one alone


async def _concurrently(app: Any, n: int) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await asyncio.gather(
            *(
                client.post("/notes", json={"id": f"n{i}"}, headers={"Idempotency-Key": f"k{i}"})
                for i in range(n)
            )
        )


def test_concurrent_requests_share_transactions_and_each_gets_its_own_answer(
    notes_db: Database, server_clock: FakeClock
) -> None:
    app = create_notes_app(notes_db, now=server_clock, purge_interval=None)
    grouped = app.state.group_commit
    if notes_db.backend != "sqlite":
        assert grouped is None  # PostgreSQL runs them side by side instead
        return
    replies = asyncio.run(_concurrently(app, 20))
    assert [r.status_code for r in replies] == [201] * 20
    assert [r.json()["id"] for r in replies] == [f"n{i}" for i in range(20)]
    assert len(read_ledger(notes_db)) == 20
    assert grouped.groups < 20, "requests that arrive together share a transaction"


def test_group_commit_can_be_switched(notes_db: Database) -> None:
    intake = Intake(notes_db)
    assert create_app(intake, purge_interval=None, group_commit=False).state.group_commit is None
    on = create_app(intake, purge_interval=None, group_commit=True).state.group_commit
    assert on is not None and on.max_group >= 1


def test_a_group_size_below_one_is_refused(notes_db: Database) -> None:
    from pigeon.server.grouping import RequestGroups

    with pytest.raises(ValueError, match="max_group"):
        RequestGroups(Intake(notes_db), max_group=0)


_SENDER: contextvars.ContextVar[str | None] = contextvars.ContextVar("sender", default=None)


class _SenderMiddleware:
    """Sets a context variable per request, as DeviceClockMiddleware does."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", ()))
        token = _SENDER.set(headers.get(b"x-sender", b"").decode() or None)
        try:
            await self.app(scope, receive, send)
        finally:
            _SENDER.reset(token)


def test_each_request_of_a_group_runs_in_its_own_context(notes_db: Database) -> None:
    # The group runs in one worker thread; what a request's middleware put in its context
    # (the device clock that corrects last-write-wins stamps) must still be its own.
    intake = Intake(notes_db)
    intake.add_operation("POST", "/who", lambda ctx: (200, {"sender": _SENDER.get()}))
    app = create_app(intake, purge_interval=None, group_commit=True)
    app.add_middleware(_SenderMiddleware)

    async def send_all() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/who", json={}, headers={"Idempotency-Key": f"w{i}", "X-Sender": f"d{i}"}
                    )
                    for i in range(12)
                )
            )

    replies = asyncio.run(send_all())
    assert [r.json()["sender"] for r in replies] == [f"d{i}" for i in range(12)]
    assert app.state.group_commit.groups < 12, "the requests were grouped"


def test_execute_group_wants_one_context_per_request(notes_db: Database) -> None:
    intake = Intake(notes_db)
    with pytest.raises(ValueError, match="2 requests but 1 contexts"):
        intake.execute_group(
            [("a", request("1")), ("a", request("2"))], [contextvars.copy_context()]
        )


def test_a_started_group_is_answered_when_its_task_is_cancelled(notes_db: Database) -> None:
    # Shutdown cancels the draining task while a group is in the writer thread: the group
    # still commits, and its requests get what committed (not an error for a done effect);
    # the cancellation is raised after that, and the writer thread is one of its own.
    from pigeon.server.grouping import RequestGroups

    started, release = threading.Event(), threading.Event()
    seen: list[str] = []

    def slow(ctx: IntakeContext) -> Any:
        seen.append(threading.current_thread().name)
        started.set()
        release.wait(5)
        return 201, {"ok": True}

    intake = Intake(notes_db)
    intake.add_operation("POST", "/slow", slow)
    grouped = RequestGroups(intake)

    async def scenario() -> tuple[Any, bool]:
        op = OperationRequest("POST", "/slow", {}, "k-slow", "k-slow")
        answer = asyncio.ensure_future(grouped.execute("p", op))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        drain = grouped._draining
        assert drain is not None
        drain.cancel()
        await asyncio.sleep(0.05)
        assert not answer.done(), "the running group is waited for"
        release.set()
        result = await answer
        with contextlib.suppress(asyncio.CancelledError):
            await drain
        return result, drain.cancelled()

    result, cancelled = asyncio.run(scenario())
    assert result.status == 201 and cancelled
    assert seen and seen[0].startswith("pigeon-writer")
    replay = intake.execute("p", OperationRequest("POST", "/slow", {}, "k-slow", "k-slow"))
    assert replay.status == 201 and replay.replayed and len(seen) == 1


class _Overlap:
    """A handler that notes its thread and how many of its calls ever ran at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.threads: set[str] = set()

    def __call__(self, ctx: IntakeContext) -> Any:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.current_thread().name)
        try:
            threading.Event().wait(0.05)
            return 201, {"ok": True}
        finally:
            with self.lock:
                self.running -= 1


def _batches_at_once(app: ASGIApp, count: int) -> list[httpx.Response]:
    async def send_all() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/pigeon/v1/batch",
                        json={
                            "operations": [
                                {"idempotency_key": f"b{b}-{j}", "method": "POST", "path": "/slow"}
                                for j in range(2)
                            ]
                        },
                    )
                    for b in range(count)
                )
            )

    return asyncio.run(send_all())


@pytest.mark.parametrize("wait", [0.0, 1.0])
def test_a_single_writer_store_takes_batches_in_turn_on_its_writer_thread(
    notes_db: Database, wait: float
) -> None:
    # One writer: a second batch's thread could only read its body while the first one
    # wrote, and two threads passing the GIL cost more than that overlap. PostgreSQL runs
    # two side by side (BATCHES_AT_ONCE), one working while the other waits on it. A batch
    # that may wait for a duplicate's original (in_progress_wait) keeps a thread of its
    # own: the original could be queued for the writer behind it.
    slow = _Overlap()
    intake = Intake(notes_db, IntakeOptions(in_progress_wait=wait))
    intake.add_operation("POST", "/slow", slow)
    app = create_app(intake, purge_interval=None)
    replies = _batches_at_once(app, 4)
    assert [r.status_code for r in replies] == [200] * 4
    assert all(a["status"] == 201 for r in replies for a in r.json()["results"])
    on_writer = notes_db.backend == "sqlite" and not wait
    assert all(name.startswith("pigeon-writer") for name in slow.threads) == on_writer
    if on_writer:
        assert slow.most == 1, "one batch at a time"
    elif notes_db.backend != "sqlite":  # SQLite's write lock takes them in turn anyway
        assert slow.most == BATCHES_AT_ONCE == 2, "two batches side by side, no more"


def test_the_writer_runs_work_in_the_callers_context_and_finishes_it_when_cancelled() -> None:
    from pigeon.server.grouping import Writer

    writer = Writer()
    started, release = threading.Event(), threading.Event()
    done: list[str | None] = []

    def work() -> str | None:
        started.set()
        release.wait(5)
        done.append(_SENDER.get())
        return _SENDER.get()

    async def scenario() -> tuple[str | None, bool]:
        _SENDER.set("first")
        first = await writer.run(lambda: _SENDER.get())
        _SENDER.set("second")
        task = asyncio.ensure_future(writer.run(work))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done(), "the started work is waited for"
        release.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return first, task.cancelled()

    first, cancelled = asyncio.run(scenario())
    assert first == "first" and cancelled
    assert done == ["second"], "it ran to its end, in the context it was started from"

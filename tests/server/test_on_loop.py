"""Which batches and groups of single requests a single-writer server applies on its event
loop (`pigeon.server.on_loop`): small, short ones, when nothing else writes; every other
one on the writer thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.core.wire import BATCH_PATH, HEALTH_PATH
from pigeon.server import on_loop
from pigeon.server.app import create_app
from pigeon.server.grouping import RequestGroups
from pigeon.server.idempotency_memory import MemoryDatabase
from pigeon.server.idempotency_stores import idempotency_store
from pigeon.server.intake import Intake, IntakeContext, OperationRequest
from pigeon.server.options import IntakeOptions
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db
from pigeon.storage.sqlite import SQLiteDatabase
from tests.holding import held_in_a_thread

LOOP = "on the loop"


def _where() -> str:
    """Where this code runs: on an event loop, or on the thread it names."""
    try:
        asyncio.get_running_loop()
        return LOOP
    except RuntimeError:
        return threading.current_thread().name


class _Where:
    """A handler that notes where each of its calls ran: on the event loop, or on the
    thread it names. Sleeps ``pause`` seconds a call."""

    def __init__(self, pause: float = 0.0) -> None:
        self.pause = pause
        self.seen: list[str] = []

    def __call__(self, ctx: IntakeContext) -> Any:
        self.seen.append(_where())
        if self.pause:
            time.sleep(self.pause)
        return 201, {"ok": True}


def _batch(path: str, keys: range, pad: int = 0) -> dict[str, Any]:
    return {
        "operations": [
            {"idempotency_key": f"{path[1:]}-{k}", "method": "POST", "path": path}
            | ({"body": {"pad": "x" * pad}} if pad else {})
            for k in keys
        ]
    }


def _send(app: Any, *batches: dict[str, Any]) -> list[httpx.Response]:
    """Each batch in turn, over one in-process client on this thread's event loop."""

    async def send() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return [await client.post(BATCH_PATH, json=batch) for batch in batches]

    replies = asyncio.run(send())
    assert [r.status_code for r in replies] == [200] * len(batches)
    assert all(e["status"] == 201 for r in replies for e in r.json()["results"])
    return replies


@pytest.fixture(params=["sqlite", "memory"])
def one_writer(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    """A single writer's database: a SQLite file, or the unit tier's memory store."""
    if request.param == "memory":
        yield MemoryDatabase()
        return
    db = open_server_db(tmp_path / "server.db")
    try:
        yield db
    finally:
        db.close()


def _app(db: Any, **routes: Callable[[IntakeContext], Any]) -> Any:
    intake = Intake(db)
    for name, handler in routes.items():
        intake.add_operation("POST", f"/{name}", handler)
    return create_app(intake, purge_interval=None)


def test_a_small_short_batch_runs_on_the_loop_once_its_route_is_known(one_writer: Any) -> None:
    fast = _Where()
    app = _app(one_writer, fast=fast)
    _send(app, _batch("/fast", range(0, 3)), _batch("/fast", range(3, 6)))
    # Nothing is known of a route before its first run: that batch goes to the writer.
    assert fast.seen[:3] == ["pigeon-writer_0"] * 3
    assert fast.seen[3:] == [LOOP] * 3


def test_a_large_or_slow_batch_runs_on_the_writer_thread(one_writer: Any) -> None:
    fast, slow = _Where(), _Where(pause=on_loop.MAX_SECONDS / 2)
    app = _app(one_writer, fast=fast, slow=slow)
    big = on_loop.MAX_BYTES // 2 + 1  # two entries over the bound together
    _send(
        app,
        _batch("/fast", range(1)),  # known from now on
        _batch("/fast", range(1, 3), pad=big),  # too many bytes
        _batch("/fast", range(3, 4 + on_loop.MAX_OPS)),  # too many operations
        _batch("/slow", range(1)),
        _batch("/slow", range(1, 4)),  # three of them expected to take 1.5x the bound
    )
    assert LOOP not in fast.seen + slow.seen


def test_a_batch_waits_on_the_writer_thread_while_another_holds_the_write_turn(
    one_writer: Any,
) -> None:
    fast = _Where()
    app = _app(one_writer, fast=fast)
    _send(app, _batch("/fast", range(1)))
    # Another thread in a write transaction, as the relay or a purge, for 0.3 s.
    with held_in_a_thread(idempotency_store(one_writer).transaction(), 0.3):
        started = time.monotonic()
        _send(app, _batch("/fast", range(1, 3)))
        assert time.monotonic() - started >= 0.2  # it waited, and not on the loop
    assert fast.seen[1:] == ["pigeon-writer_0"] * 2


def test_another_process_holding_the_write_turn_sends_the_batch_to_the_writer(
    tmp_path: Any,
) -> None:
    db, other = open_server_db(tmp_path / "server.db"), open_server_db(tmp_path / "server.db")
    assert isinstance(other, SQLiteDatabase)
    try:
        fast = _Where()
        app = _app(db, fast=fast)
        _send(app, _batch("/fast", range(1)))
        # The file lock of a second opening stands for another pigeon process's writer.
        with other.writer, idempotency_store(db).turn_at_once() as ours:
            assert not ours
        with idempotency_store(db).turn_at_once() as ours:
            assert ours
    finally:
        other.close()
        db.close()


def test_a_postgresql_store_never_applies_a_batch_on_the_loop(notes_pg: Database) -> None:
    # Its transactions run side by side: it has no turn to give, and batches take
    # worker threads (two at once), never the loop.
    fast = _Where()
    app = _app(notes_pg, fast=fast)
    _send(app, _batch("/fast", range(2)), _batch("/fast", range(2, 4)))
    assert LOOP not in fast.seen
    with idempotency_store(notes_pg).turn_at_once() as ours:
        assert not ours


def test_the_health_probe_is_answered_between_batches_on_the_loop(one_writer: Any) -> None:
    # Batches that run on the loop, one after another on two connections: each one holds
    # the loop no longer than its bound, so the probe gets in between.
    fast = _Where()
    app = _app(one_writer, fast=fast)
    _send(app, _batch("/fast", range(1)))

    async def scenario() -> float:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            async def stream(s: int) -> None:
                for b in range(10):
                    first = 1 + (s * 10 + b) * 16
                    keys = range(first, first + 16)
                    assert (await client.post(BATCH_PATH, json=_batch("/fast", keys))).is_success

            async def probe() -> float:
                worst = 0.0
                for _ in range(10):
                    started = time.monotonic()
                    assert (await client.get(HEALTH_PATH)).is_success
                    worst = max(worst, time.monotonic() - started)
                    await asyncio.sleep(0.005)
                return worst

            *_, worst = await asyncio.gather(stream(0), stream(1), probe())
            return worst

    assert asyncio.run(scenario()) < 0.1
    assert fast.seen.count(LOOP) >= 16


def _post(app: Any, *bodies: dict[str, Any], together: bool = False) -> None:
    """Single requests to /fast, one after another or all at once."""

    async def send() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            posts = [
                client.post("/fast", json=body, headers={"idempotency-key": str(uuid.uuid4())})
                for body in bodies
            ]
            if together:
                return list(await asyncio.gather(*posts))
            return [await post for post in posts]

    assert [r.status_code for r in asyncio.run(send())] == [201] * len(bodies)


def test_single_requests_small_and_short_run_on_the_loop(one_writer: Any) -> None:
    fast = _Where()
    app = _app(one_writer, fast=fast)
    _post(app, {}, {}, {})
    assert fast.seen == ["pigeon-writer_0", LOOP, LOOP]


def test_a_group_of_single_requests_too_large_together_runs_on_the_writer(
    one_writer: Any,
) -> None:
    fast = _Where()
    app = _app(one_writer, fast=fast)
    _post(app, {})
    pad = "x" * (on_loop.MAX_BYTES // 4)
    _post(app, *({"pad": pad, "n": n} for n in range(1, 9)), together=True)
    # The first may go alone, on the loop; the others arrive while it runs and go as
    # one group whose bodies add up to twice the bound.
    assert fast.seen.count("pigeon-writer_0") >= 7


def test_a_request_of_unknown_size_runs_on_the_writer(one_writer: Any) -> None:
    intake = Intake(one_writer)
    fast = _Where()
    intake.add_operation("POST", "/fast", fast)
    groups = RequestGroups(intake)

    async def twice() -> None:
        for key in ("a", "b"):
            op = OperationRequest("POST", "/fast", {}, key, key)
            assert (await groups.execute("p", op)).status == 201

    asyncio.run(twice())
    assert fast.seen == ["pigeon-writer_0"] * 2


@given(
    size=st.integers(0, 4 * on_loop.MAX_BYTES),
    ops=st.integers(0, 4 * on_loop.MAX_OPS),
    expected=st.none() | st.floats(0, 4 * on_loop.MAX_SECONDS),
)
def test_a_batch_is_on_the_loop_only_within_every_bound(
    size: int, ops: int, expected: float | None
) -> None:
    within = size <= on_loop.MAX_BYTES and ops <= on_loop.MAX_OPS
    within = within and expected is not None and expected <= on_loop.MAX_SECONDS
    assert (on_loop.small(size) and on_loop.short(ops, expected)) == within


@contextlib.contextmanager
def _hooked(db: Any, tmp_path: Any) -> Iterator[tuple[Any, _Where, list[str]]]:
    """An app whose /fast route has a replay hook and whose intake an after_commit hook,
    each noting where it ran; on SQLite, after_commit writes through an opening of its
    own of the file, as an application enqueueing outside the intake's transaction does
    (the rehearsal's crash-after-commit mutant), if the write turn is free at once (were
    it still held by the intake, the write would wait for it)."""
    fast, seen = _Where(), []
    own = open_server_db(tmp_path / "server.db") if isinstance(db, SQLiteDatabase) else None

    def after(keys: list[str]) -> None:
        seen.append(f"after_commit {_where()}")
        if own is None:
            return
        with idempotency_store(own).turn_at_once() as free:
            if free:
                with own.transaction():
                    seen.append("after_commit's own write waited for nobody")

    def replayed(tx: Any, stored: Any, info: Any) -> Any:
        seen.append(f"replay hook {_where()}")
        return stored

    intake = Intake(db, after_commit=after)
    intake.add_operation("POST", "/fast", fast, on_replay=replayed)
    try:
        yield create_app(intake, purge_interval=None), fast, seen
    finally:
        if own is not None:
            own.close()


def test_the_applications_hooks_after_a_commit_on_the_loop_run_on_the_writer(
    one_writer: Any, tmp_path: Any
) -> None:
    with _hooked(one_writer, tmp_path) as (app, fast, seen):
        _send(app, _batch("/fast", range(1)))  # the route known from now on
        seen.clear()
        _send(app, _batch("/fast", range(1, 3)), _batch("/fast", range(1, 3)))  # replayed
        _post(app, {}, {})
    assert fast.seen[1:] == [LOOP] * 4  # the handlers ran on the loop
    writer = "pigeon-writer_0"
    assert seen.count(f"after_commit {writer}") == 3  # a batch, then each single request
    assert seen.count(f"replay hook {writer}") == 2
    assert not [s for s in seen if LOOP in s]
    if isinstance(one_writer, SQLiteDatabase):
        assert seen.count("after_commit's own write waited for nobody") == 3


def test_without_hooks_to_run_a_commit_on_the_loop_is_finished_there(one_writer: Any) -> None:
    fast = _Where()
    app = _app(one_writer, fast=fast)
    _send(app, _batch("/fast", range(1)))
    started = time.monotonic()
    _send(app, _batch("/fast", range(1, 3)), _batch("/fast", range(1, 3)))  # a replay
    assert fast.seen[1:] == [LOOP] * 2
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("one_writer", "set_based"),
    [("sqlite", False), ("memory", False), ("sqlite", True)],  # memory: no multi-row claims
    ids=["sqlite-per-operation", "memory-per-operation", "sqlite-set-based"],
    indirect=["one_writer"],
)
def test_a_route_whose_own_validator_is_slow_runs_on_the_writer(
    one_writer: Any, set_based: bool
) -> None:
    # The application's validator runs before its handler, on the loop with it: its time
    # counts toward the route's measured duration as the handler's does, on the batch's
    # set-based path as on the per-operation one.
    fast, seen = _Where(), []

    def slow_check(body: Any, params: Any) -> None:
        time.sleep(on_loop.MAX_SECONDS * 1.2)  # a quick handler behind it

    def many(tx: Any, contexts: Any) -> list[Any]:
        seen.extend(fast(ctx) for ctx in contexts)
        return [(201, {"ok": True})] * len(contexts)

    intake = Intake(one_writer)
    intake.add_operation(
        "POST", "/fast", fast, validate=slow_check, many=many if set_based else None
    )
    app = create_app(intake, purge_interval=None)
    _send(app, _batch("/fast", range(0, 2)), _batch("/fast", range(2, 4)))
    assert LOOP not in fast.seen and len(fast.seen) == 4
    if set_based:
        assert len(seen) == 4  # the set handler applied them
    else:
        _post(app, {}, {})
        assert fast.seen[4:] == ["pigeon-writer_0"] * 2


def test_a_chunked_batch_runs_on_the_writer_each_chunk_heard_as_it_commits(
    one_writer: Any,
) -> None:
    fast, heard = _Where(), []
    intake = Intake(one_writer, IntakeOptions(batch_chunk=2), after_commit=heard.append)
    intake.add_operation("POST", "/fast", fast)
    app = create_app(intake, purge_interval=None)
    _send(app, _batch("/fast", range(1)), _batch("/fast", range(1, 3)))  # one chunk
    _send(app, _batch("/fast", range(3, 6)))  # two
    assert fast.seen[1:3] == [LOOP] * 2
    assert fast.seen[3:] == ["pigeon-writer_0"] * 3
    assert heard[1:] == [["fast-1", "fast-2"], ["fast-3", "fast-4"], ["fast-5"]]

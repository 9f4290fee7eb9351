"""SyncEngine end to end: real OfflineQueue file, real uvicorn on loopback, real httpx."""

from __future__ import annotations

import gc
import json
import time
import weakref
from typing import Any

import httpx
import pytest

from pigeon.core import wire
from pigeon.core.operation import Operation, OpStatus
from pigeon.core.retry import RetryPolicy
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.exceptions import ConfigurationError
from pigeon.protocol.http import HttpTransport
from pigeon.sync.classify import ReplyKind, ReplyOutcome
from pigeon.sync.connectivity import ManualMonitor
from pigeon.sync.engine import SyncEngine
from pigeon.sync.events import SyncCallbacks
from pigeon.sync.options import SyncOptions
from tests.protocol.wire_app import Fault, LiveServer, WireState
from tests.sync.conftest import MakeEngine


def bodies(state: WireState, entity: str) -> list[Any]:
    return [e["body"] for e in state.effects(entity)]


def test_per_entity_order_and_etag_recorded(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    engine = make_engine()
    for i in range(3):
        for entity in ("a", "b"):
            engine.enqueue("update", f"thing:{entity}", {"i": i})
    assert engine.flush(timeout=10)
    assert bodies(state, "a") == bodies(state, "b") == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert queue.stats().depth == 0 and engine.totals.delivered == 6
    assert queue.base_version("thing:a") == "3"


def test_failing_entity_holds_back_only_itself_and_retries_with_the_same_key(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    failed: list[ReplyOutcome] = []
    engine = make_engine(on_failed=lambda op, outcome: failed.append(outcome))
    # Retry-After pins the first backoff, so flush() surely returns before a's retry.
    state.faults["a"] += [Fault(503, retry_after="0.5"), Fault(500, after_effect=True)]
    first_a = engine.enqueue("update", "thing:a", {"i": 0})
    engine.enqueue("update", "thing:a", {"i": 1})
    engine.enqueue("update", "thing:b", {"i": 0})
    assert engine.flush(timeout=10)
    # a's head is backing off; b went through, a's tail waited behind its head.
    assert bodies(state, "b") == [{"i": 0}] and bodies(state, "a") == []
    assert engine.drain(timeout=10)
    assert bodies(state, "a") == [{"i": 0}, {"i": 1}]  # the lost reply was replayed, not redone
    assert state.seen_keys[first_a.idempotency_key] == 3
    assert [o.status for o in failed] == [503, 500]
    assert engine.totals.replayed == 1


def test_retry_after_is_honoured(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    engine = make_engine()
    state.faults["a"].append(Fault(429, retry_after="1"))
    op = engine.enqueue("update", "thing:a", {"x": 1})
    started = time.time()
    assert engine.flush(timeout=5)
    stored = queue.get(op.id)
    assert stored.attempts == 1
    assert stored.next_attempt_at - started == pytest.approx(1.0, abs=0.3)
    assert engine.drain(timeout=5)
    assert time.time() - started >= 0.9
    assert len(state.effects("a")) == 1


def test_key_in_progress_waits_for_retry_after(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    engine = make_engine()
    state.faults["a"].append(Fault(409, retry_after="1", problem=wire.PROBLEM_KEY_IN_PROGRESS))
    op = engine.enqueue("update", "thing:a", {"x": 1})
    started = time.time()
    assert engine.flush(timeout=5)
    assert queue.get(op.id).status is OpStatus.PENDING
    assert queue.get(op.id).next_attempt_at - started >= 0.7
    assert engine.drain(timeout=5) and len(state.effects("a")) == 1


def test_401_pauses_without_spending_attempts_until_resumed(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState, server: LiveServer
) -> None:
    state.tokens = {"alice:new"}
    token = {"value": "alice:old"}
    paused: list[str] = []
    engine = make_engine(
        HttpTransport(server.url, token=lambda: token["value"]), on_paused=paused.append
    )
    ops = [engine.enqueue("update", f"thing:{e}", {"e": e}) for e in "abc"]
    assert engine.flush(timeout=5) is False
    assert engine.paused and "401" in engine.paused and paused == [engine.paused]
    assert queue.stats().paused == engine.paused
    assert state.single_requests == 1  # stopped at the first 401, not one per operation
    assert all(queue.get(op.id).attempts == 0 for op in ops)
    assert all(queue.get(op.id).status is OpStatus.PENDING for op in ops)
    assert engine.flush(timeout=5) is False and state.single_requests == 1  # paused: no sends
    token["value"] = "alice:new"
    engine.resume()
    assert engine.flush(timeout=5)
    assert all(queue.get(op.id).status is OpStatus.DELIVERED for op in ops)
    assert all(queue.get(op.id).attempts == 0 for op in ops)


def test_permanent_failure_goes_to_the_dead_letters_and_others_continue(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    dead: list[tuple[Operation, ReplyOutcome]] = []
    engine = make_engine(on_dead=lambda op, outcome: dead.append((op, outcome)))
    state.faults["a"].append(Fault(400))
    bad = engine.enqueue("update", "thing:a", {"x": 1})
    engine.enqueue("update", "thing:b", {"x": 1})
    assert engine.flush(timeout=5)
    assert [op.id for op, _ in dead] == [bad.id]
    assert dead[0][1].kind is ReplyKind.PERMANENT and dead[0][0].status is OpStatus.DEAD
    assert [op.id for op in queue.dead_letters()] == [bad.id]
    assert len(state.effects("b")) == 1


def test_transient_failures_exhaust_into_a_dead_letter(
    tmp_path: Any, server: LiveServer, state: WireState
) -> None:
    from pigeon.sync.connectivity import ManualMonitor
    from pigeon.sync.engine import SyncEngine

    policy = RetryPolicy(base=0.01, cap=0.02, max_attempts=3)
    dead: list[Operation] = []
    with (
        OfflineQueue(tmp_path / "q.db", QueueOptions(retry_policy=policy)) as queue,
        HttpTransport(server.url) as transport,
    ):
        engine = SyncEngine(
            queue,
            transport,
            callbacks=SyncCallbacks(on_dead=lambda op, _: dead.append(op)),
            connectivity=ManualMonitor(),
        )
        state.faults["a"] += [Fault(503)] * 5
        op = engine.enqueue("update", "thing:a", {"x": 1})
        assert engine.drain(timeout=5)
    assert [d.id for d in dead] == [op.id] and dead[0].attempts == 3
    assert state.seen_keys[op.idempotency_key] == 3


def test_conflict_is_held_with_the_servers_answer_and_blocks_its_entity(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    conflicts: list[tuple[Operation, ReplyOutcome]] = []
    engine = make_engine(on_conflict=lambda op, outcome: conflicts.append((op, outcome)))
    stale = engine.enqueue("update", "thing:a", {"x": 1}, base_version="7")
    later = engine.enqueue("update", "thing:a", {"x": 2})
    engine.enqueue("update", "thing:b", {"x": 1})
    assert engine.flush(timeout=5)
    assert state.seen_if_match[0] == '"7"'
    assert [(op.id, o.status) for op, o in conflicts] == [(stale.id, 412)]
    assert conflicts[0][1].body["type"] == wire.PROBLEM_VERSION_CONFLICT
    assert queue.get(stale.id).status is OpStatus.CONFLICT
    assert queue.get(later.id).status is OpStatus.PENDING and state.effects("a") == []
    assert len(state.effects("b")) == 1


def test_batch_partial_results_release_the_unattempted(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState, server: LiveServer
) -> None:
    engine = make_engine(HttpTransport(server.url, batch=True))
    state.faults["b"].append(Fault(503))
    ops = [engine.enqueue("update", f"thing:{e}", {"e": e}) for e in "abcd"]
    report = engine.executor.run_once(100)
    assert (report.taken, report.delivered, report.failed, report.released) == (4, 1, 1, 2)
    a, b, c, d = (queue.get(op.id) for op in ops)
    assert a.status is OpStatus.DELIVERED
    assert (b.status, b.attempts) == (OpStatus.PENDING, 1)
    assert (c.attempts, d.attempts) == (0, 0)  # not attempted: no attempt spent
    assert engine.drain(timeout=5)
    assert sorted(e["entity"] for e in state.effects()) == ["a", "b", "c", "d"]
    assert state.single_requests == 0


def test_a_batch_whose_reply_was_lost_retries_together_and_is_replayed(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState, server: LiveServer
) -> None:
    transport = HttpTransport(server.url, batch=True, timeout=httpx.Timeout(5.0, read=0.3))
    engine = make_engine(transport)
    state.delay = 0.6  # the server commits, but after the client stopped listening
    ops = [engine.enqueue("update", f"thing:{e}", {"e": e}) for e in "abc"]
    report = engine.executor.run_once(100)
    assert report.failed == 3
    retries = [queue.get(op.id).next_attempt_at for op in ops]
    assert max(retries) - min(retries) < 0.01  # one delay for the whole batch
    # Let the server finish the first request (its effects are in), however loaded the
    # machine: a fixed sleep raced the 0.6 s delay and the retry met "in progress".
    deadline = time.monotonic() + 10
    while len(state.effects()) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    state.delay = 0.0
    assert engine.drain(timeout=5)
    assert sorted(e["entity"] for e in state.effects()) == ["a", "b", "c"]
    assert engine.totals.replayed == 3
    assert state.batch_requests == 2


def test_callback_errors_do_not_strand_operations(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    def explode(op: Operation, outcome: ReplyOutcome) -> None:
        raise RuntimeError("app bug")

    engine = make_engine(on_delivered=explode)
    engine.enqueue("update", "thing:a", {"x": 1})
    engine.enqueue("update", "thing:b", {"x": 1})
    assert engine.flush(timeout=5)
    assert queue.stats().depth == 0 and len(state.effects()) == 2


def test_bad_options_are_refused(queue: OfflineQueue, server: LiveServer) -> None:
    from pigeon.sync.engine import SyncEngine

    with HttpTransport(server.url) as transport:
        with pytest.raises(ConfigurationError, match="cycle_size"):
            SyncEngine(queue, transport, SyncOptions(cycle_size=0))
        with pytest.raises(ConfigurationError, match="idle_recheck"):
            SyncEngine(queue, transport, SyncOptions(idle_recheck=0))


def test_close_lets_go_of_the_queue_and_the_monitor(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    """An app that makes an engine per session on one queue: a closed engine is no longer
    woken by enqueues or connectivity, and nothing keeps it alive; start() takes hold again."""
    monitor = ManualMonitor()
    engine = make_engine(connectivity=monitor)
    engine.start()
    engine.enqueue("update", "thing:a", {"i": 0})
    assert engine.flush(timeout=10)
    engine.close()
    queue.enqueue("update", "thing:a", {"i": 1})
    time.sleep(0.2)  # a still-subscribed engine would wake and try to send it
    assert bodies(state, "a") == [{"i": 0}]
    engine.start()  # attached again: the new operation goes out
    assert engine.flush(timeout=10)
    assert bodies(state, "a") == [{"i": 0}, {"i": 1}]
    engine.close()

    dropped = SyncEngine(queue, HttpTransport("http://127.0.0.1:9"), connectivity=monitor)
    ref = weakref.ref(dropped)
    dropped.close()
    del dropped
    gc.collect()
    assert ref() is None, "the queue or the monitor still holds a closed engine"
    queue.enqueue("update", "thing:b", {"i": 0})  # no callback left to a dead engine
    monitor.set_online(False)
    monitor.set_online(True)


def test_a_server_without_the_batch_route_pauses_the_queue_instead_of_killing_it(
    queue: OfflineQueue,
) -> None:
    """404 for the batch request itself, every time: nothing was applied, and retrying
    it would run every operation out of attempts into the dead letters."""
    from pigeon.protocol.inprocess import InProcessTransport

    route = {"exists": False}
    requests: list[int] = []

    def server(request: httpx.Request) -> httpx.Response:
        operations = json.loads(request.content)["operations"]
        requests.append(len(operations))
        if not route["exists"]:
            return httpx.Response(404, text="Not Found")
        results = [{"id": o["id"], "status": 200, "body": {}} for o in operations]
        return httpx.Response(200, json={"results": results})

    paused: list[str] = []
    with InProcessTransport(handler=server, batch=True) as transport:
        engine = SyncEngine(
            queue,
            transport,
            callbacks=SyncCallbacks(on_paused=paused.append),
            connectivity=ManualMonitor(),
        )
        ops = [engine.enqueue("update", f"thing:{e}", {"e": e}) for e in "abc"]
        assert engine.flush(timeout=5) is False
        assert engine.drain(timeout=5) is False
        assert requests == [3]  # paused: no second request, no attempt spent
        assert engine.paused and "404" in engine.paused and paused == [engine.paused]
        assert queue.stats().paused == engine.paused  # what `pigeon queue stats` shows
        assert queue.dead_letters() == []
        for op in ops:
            stored = queue.get(op.id)
            assert (stored.status, stored.attempts) == (OpStatus.PENDING, 0)
        route["exists"] = True  # the server is fixed
        engine.resume()
        assert engine.drain(timeout=5)
        assert all(queue.get(op.id).status is OpStatus.DELIVERED for op in ops)
        assert all(queue.get(op.id).attempts == 0 for op in ops)


def test_if_match_is_filled_in_for_updates_and_deletes_only(queue: OfflineQueue) -> None:
    """An app-defined operation (a comment on a note) does not replace the entity: a
    version check it never asked for would fail it with 412 after anyone's edit."""
    from pigeon.protocol.inprocess import InProcessTransport

    seen: list[tuple[str, str | None]] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("if-match")))
        return httpx.Response(200, json={}, headers={"ETag": '"v2"'})

    with InProcessTransport(handler=server) as transport:
        engine = SyncEngine(queue, transport, connectivity=ManualMonitor())
        engine.enqueue("update", "note:1", {"text": "x"}, endpoint="/notes/1")
        assert engine.flush(timeout=5)  # the reply's ETag: note:1 is now at "v2"
        engine.enqueue("comment", "note:1", {"text": "nice"}, endpoint="/notes/1/c")
        engine.enqueue("pin", "note:1", {}, endpoint="/notes/1/pin", base_version="v2")
        engine.enqueue("update", "note:1", {"text": "y"}, endpoint="/notes/1")
        engine.enqueue("delete", "note:1", None, endpoint="/notes/1")
        assert engine.flush(timeout=5)
    assert seen == [
        ("/notes/1", None),
        ("/notes/1/c", None),  # app-defined: no If-Match of its own accord
        ("/notes/1/pin", '"v2"'),  # ...unless the app asked for one
        ("/notes/1", '"v2"'),
        ("/notes/1", '"v2"'),
    ]


def test_a_redirect_pauses_the_queue_instead_of_dead_lettering_every_operation(
    make_engine: MakeEngine, queue: OfflineQueue, state: WireState
) -> None:
    # An http base URL behind an https redirect answers every operation 308: that is the
    # configuration's fault, not the operations'. Nothing is dead-lettered, no attempt is
    # spent, the reason names the redirect; after a fix and resume(), all are delivered.
    paused: list[str] = []
    engine = make_engine(on_paused=paused.append)
    state.faults["a"].append(Fault(308))
    ops = [engine.enqueue("update", f"thing:{e}", {"e": e}) for e in "ab"]
    assert engine.flush(timeout=5) is False
    assert engine.paused and "308" in engine.paused and paused == [engine.paused]
    assert queue.dead_letters() == []
    assert all(queue.get(op.id).attempts == 0 for op in ops)
    engine.resume()
    assert engine.flush(timeout=5)
    assert all(queue.get(op.id).status is OpStatus.DELIVERED for op in ops)


def test_options_and_callbacks_shape_a_real_sync(
    queue: OfflineQueue, server: LiveServer, state: WireState
) -> None:
    """SyncOptions and SyncCallbacks shape a real sync: their batch size, pipeline and
    callbacks hold."""
    delivered: list[str] = []
    with HttpTransport(server.url, batch=True) as transport:
        engine = SyncEngine(
            queue,
            transport,
            SyncOptions(cycle_size=2, pipeline=2),
            callbacks=SyncCallbacks(on_delivered=lambda op, _: delivered.append(op.entity)),
            connectivity=ManualMonitor(),
        )
        try:
            for e in range(5):
                engine.enqueue("update", f"thing:{e}", {"e": e})
            assert engine.flush(timeout=10)
            assert sorted(delivered) == [f"thing:{e}" for e in range(5)]
            assert engine.options == SyncOptions(cycle_size=2, pipeline=2)
            assert engine.totals.delivered == 5
            assert all(bodies(state, f"{e}") == [{"e": e}] for e in range(5))
        finally:
            engine.close()

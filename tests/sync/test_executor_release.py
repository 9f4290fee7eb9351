"""An exchange that fails after the request may have reached the server releases its
operations as *sent*: a later edit is never folded into them under a key the server holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pigeon.core.operation import Operation, OpStatus
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.protocol.transport import Exchange
from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.storage.server import open_server_db
from pigeon.sync.classify import ReplyKind, ReplyOutcome, classify
from pigeon.sync.events import SyncCallbacks
from pigeon.sync.executor import Executor


class BreaksAfterSending:
    """The real transport, which then fails before the caller can read the answer."""

    def __init__(self, inner: InProcessTransport) -> None:
        self.inner = inner

    def send(self, ops: list[Operation], *, keep_going: Callable[..., bool]) -> Exchange:
        self.inner.send(ops, keep_going=keep_going)
        raise RuntimeError("lost the answer after the server applied it")

    def probe(self) -> bool:
        return True

    def close(self) -> None:
        self.inner.close()


def test_failure_after_send_keeps_the_operation_marked_sent(tmp_path: Path) -> None:
    sqlite_db = open_server_db(tmp_path / "server.db")
    transport = InProcessTransport(create_notes_app(sqlite_db, purge_interval=None))
    queue = OfflineQueue(tmp_path / "edge.db")
    try:
        first = queue.enqueue("create", "note:1", {"id": "1", "title": "t", "body": "one"})
        executor: Any = Executor(queue, BreaksAfterSending(transport))  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="lost the answer"):
            executor.run_once(10)
        assert queue.get(first.id).status is OpStatus.PENDING
        # The server has applied the create under its key: the edit must not fold into it.
        queue.enqueue("update", "note:1", {"id": "1", "title": "t", "body": "two"})
        assert [op.type for op in queue.pending] == ["create", "update"]

        good = Executor(queue, transport)
        while queue.stats().depth:
            good.run_once(10)
        assert queue.stats().dead == 0
        ledger = read_ledger(sqlite_db)
        assert [row["method"] for row in ledger] == ["POST", "PUT"]
    finally:
        queue.close()
        transport.close()
        sqlite_db.close()


def test_an_auth_refusal_pauses_and_keeps_the_operation_marked_sent(tmp_path: Path) -> None:
    import httpx

    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["idempotency-key"])
        return httpx.Response(401, json={"detail": "token expired"})

    transport = InProcessTransport(handler=handler)
    queue = OfflineQueue(tmp_path / "edge.db")
    try:
        first = queue.enqueue("create", "note:1", {"id": "1", "body": "one"})
        Executor(queue, transport).run_once(10)
        assert seen == [first.idempotency_key]
        assert queue.paused is not None
        assert queue.get(first.id).attempts == 0  # no attempt spent on authorisation
        # The server saw that key: a later edit must not be folded in under it.
        queue.enqueue("update", "note:1", {"id": "1", "body": "two"})
        assert [op.type for op in queue.pending] == ["create", "update"]
    finally:
        queue.close()
        transport.close()


def test_an_endpoint_without_a_method_gets_one_for_every_transport(tmp_path: Path) -> None:
    with OfflineQueue(tmp_path / "edge.db") as queue:
        graded = queue.enqueue("grade", "answer:1", {"score": 3}, endpoint="/grades")
        settings = queue.enqueue("update", "settings", {"theme": "dark"}, endpoint="/settings")
        assert (graded.method, graded.endpoint) == ("POST", "/grades")
        assert (settings.method, settings.endpoint) == ("PUT", "/settings")
        assert graded.to_wire()["method"] == "POST"


def test_callbacks_fire_only_after_the_settling_transaction_commits(tmp_path: Path) -> None:
    import sqlite3

    from pigeon.sync.events import SyncCallbacks
    from tests.sync.conftest import FailsToCommitOnce

    sqlite_db = open_server_db(tmp_path / "server.db")
    transport = InProcessTransport(create_notes_app(sqlite_db, purge_interval=None), batch=True)
    queue = FailsToCommitOnce(tmp_path / "edge.db")
    queue.armed = True  # the settling's commit fails
    delivered: list[str] = []
    try:
        op = queue.enqueue("create", "note:1", {"id": "1", "title": "t", "body": "b"})
        executor = Executor(
            queue, transport, SyncCallbacks(on_delivered=lambda o, _: delivered.append(o.id))
        )
        with pytest.raises(sqlite3.OperationalError):
            executor.run_once(10)
        assert delivered == []  # nothing was told while nothing was durable
        executor.run_once(10)  # resent with its key, replayed, settled
        assert delivered == [op.id]
        assert queue.get(op.id).status is OpStatus.DELIVERED
        assert len(read_ledger(sqlite_db)) == 1
    finally:
        queue.close()
        transport.close()
        sqlite_db.close()


def test_operations_a_batch_reply_leaves_out_stay_marked_sent(tmp_path: Path) -> None:
    """The server stopped the batch at b (another request holds b's key: 409 in progress,
    as when the network duplicated this very batch): c was not applied by THIS request,
    but the copy may be applying it. Folding a later edit into c under its key would make
    the resend differ from what the server holds: 422 key-reused, a dead letter whose
    effect happened (seen in the demo under load)."""
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        ops = json.loads(request.content)["operations"]
        busy = {"type": "urn:pigeon:problem:key-in-progress", "status": 409}
        results = [
            {"id": ops[0]["id"], "status": 201, "body": {}, "replayed": False, "headers": {}},
            {"id": ops[1]["id"], "status": 409, "body": busy, "headers": {"retry-after": "1"}},
        ]
        return httpx.Response(200, json={"results": results})

    transport = InProcessTransport(handler=handler, batch=True)
    queue = OfflineQueue(tmp_path / "edge.db")
    try:
        for n in "abc":
            queue.enqueue("create", f"note:{n}", {"id": n, "body": "one"})
        Executor(queue, transport).run_once(10)
        c = [op for op in queue.pending if op.entity == "note:c"]
        assert [op.attempts for op in c] == [0]  # not attempted here: no attempt spent
        queue.enqueue("update", "note:c", {"id": "c", "body": "two"})
        assert [op.type for op in queue.pending if op.entity == "note:c"] == ["create", "update"]
    finally:
        queue.close()
        transport.close()


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "one-by-one"])
def test_a_delivery_tells_and_stores_what_classify_says_of_its_reply(
    tmp_path: Path, batch: bool
) -> None:
    # A batch's deliveries skip the outcome object unless a callback is there to get it:
    # what the callback gets and what the queue stores must be classify's all the same.
    sqlite_db = open_server_db(tmp_path / "server.db")
    transport = InProcessTransport(create_notes_app(sqlite_db, purge_interval=None), batch=batch)
    queue = OfflineQueue(tmp_path / "edge.db")
    told: list[tuple[str, ReplyOutcome]] = []
    executor = Executor(
        queue, transport, SyncCallbacks(on_delivered=lambda o, r: told.append((o.id, r)))
    )
    try:
        ops = [
            queue.enqueue("create", "note:1", {"id": "1", "title": "t", "body": "one"}),
            queue.enqueue("create", "note:2", {"id": "2", "title": "t", "body": "two"}),
        ]
        while queue.stats().depth:
            executor.run_once(10)
        ops.append(queue.enqueue("update", "note:1", {"id": "1", "title": "t", "body": "1b"}))
        while queue.stats().depth:
            executor.run_once(10)
        assert [op_id for op_id, _ in told] == [op.id for op in ops]
        for op_id, outcome in told:
            stored = queue.get(op_id).response
            expected = classify(outcome.status, {"ETag": f'"{outcome.etag}"'}, outcome.body, now=0)
            assert outcome == expected and outcome.kind is ReplyKind.DELIVERED
            assert stored == {"status": outcome.status, "body": outcome.body, "etag": outcome.etag}
        assert [outcome.etag for _, outcome in told] == ["1", "1", "2"]
        assert [outcome.status for _, outcome in told] == [201, 201, 200]
        assert queue.base_version("note:1") == "2"
    finally:
        transport.close()
        queue.close()
        sqlite_db.close()

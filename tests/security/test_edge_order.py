"""Finding 8 of issue 21, replayed from outside: an edge queue syncing with ``pigeon
serve`` as deployed (both backends), through a fault proxy that answers 503 to every
request until told otherwise, so that a create dies of exhausted attempts.

The rule (DESIGN.md, order per entity): a dead operation blocks its own entity. The
update made after the dead create is held, never sent; ``pigeon queue retry`` puts the
create back in its own place, and the server applies the create, then the update. An
``on_dead`` that answers ``DeadTail.DISCARD`` drops both: the server never hears of it.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from pigeon.core.operation import Operation, OpStatus
from pigeon.core.retry import RetryPolicy
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.http import HttpTransport
from pigeon.reference.faultproxy import FaultPlan, FaultProxy
from pigeon.sync.classify import ReplyOutcome
from pigeon.sync.events import DeadTail, SyncCallbacks
from pigeon.sync.executor import Executor
from tests import processes
from tests.clocks import FakeClock
from tests.security.conftest import PIGEON, Deployed

POLICY = RetryPolicy(base=0.01, factor=1.0, cap=0.01, max_attempts=2)


def _ledger(deployed: Deployed) -> list[str]:
    """The idempotency keys the server applied, in the order it committed them."""
    reply = httpx.get(deployed.url + "/pigeon/v1/ledger", headers=deployed.operator, timeout=10)
    assert reply.status_code == 200, reply.text
    return [entry["idempotency_key"] for entry in reply.json()["entries"]]


def _note(deployed: Deployed, note_id: str) -> httpx.Response:
    return httpx.get(f"{deployed.url}/notes/{note_id}", headers=deployed.user("ada"), timeout=10)


def _sync(executor: Executor, clock: FakeClock) -> None:
    for _ in range(20):
        # Past every backoff, and past the real time `pigeon queue retry` made it due at.
        clock.now = max(clock.now, time.time()) + 1.0
        if executor.run_once(100).taken == 0:
            return
    raise AssertionError("the queue never settled")


def _dead_create_then_update(
    deployed: Deployed, tmp_path: Path, answer: DeadTail
) -> tuple[OfflineQueue, Operation, Operation, FaultProxy, Executor, FakeClock]:
    """A create and an update of its note, synced through a proxy that refuses every
    request until the create is dead (two attempts); then requests pass, and it syncs
    again."""
    clock = FakeClock(time.time())
    proxy = FaultProxy(deployed.url, FaultPlan(error=1.0)).start()
    queue = OfflineQueue(tmp_path / "edge.db", QueueOptions(retry_policy=POLICY), now=clock)
    transport = HttpTransport(proxy.url, token=deployed.token("ada"), batch=True)

    def on_dead(op: Operation, outcome: ReplyOutcome) -> DeadTail:
        return answer

    executor = Executor(queue, transport, SyncCallbacks(on_dead=on_dead), clock=clock)
    create = queue.enqueue("create", "note:n1", {"id": "n1", "text": "made"})
    update = queue.enqueue("update", "note:n1", {"text": "edited"}, method="PATCH")
    _sync(executor, clock)
    proxy.set_plan(FaultPlan())  # the network is fine again
    _sync(executor, clock)
    return queue, create, update, proxy, executor, clock


def test_a_dead_create_holds_its_update_until_retried_in_place(
    deployed: Deployed, tmp_path: Path
) -> None:
    queue, create, update, proxy, executor, clock = _dead_create_then_update(
        deployed, tmp_path, DeadTail.HOLD
    )
    try:
        assert proxy.counts["requests"] == 2  # the create's two attempts, refused; nothing else
        assert queue.get(create.id).status is OpStatus.DEAD
        assert queue.get(update.id).held and queue.stats().held == 1
        assert _note(deployed, "n1").status_code == 404 and _ledger(deployed) == []
        retried = processes.run(
            [*PIGEON, "queue", "retry", "-f", str(queue.path), create.id],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert retried.returncode == 0, retried.stderr
        _sync(executor, clock)
        assert _ledger(deployed) == [create.idempotency_key, update.idempotency_key]
        note = _note(deployed, "n1").json()
        assert note["data"]["text"] == "edited" and note["version"] == 2
        assert queue.stats().held == 0 and queue.pending == []
    finally:
        executor.transport.close()
        queue.close()
        proxy.stop()


def test_on_dead_may_discard_the_dead_create_with_what_it_held(
    deployed: Deployed, tmp_path: Path
) -> None:
    queue, create, update, proxy, executor, _ = _dead_create_then_update(
        deployed, tmp_path, DeadTail.DISCARD
    )
    try:
        assert proxy.counts["requests"] == 2  # the create's two attempts, refused; nothing else
        assert _note(deployed, "n1").status_code == 404 and _ledger(deployed) == []
        kept = {op.id for op in queue.operations()}
        assert create.id not in kept and update.id not in kept
    finally:
        executor.transport.close()
        queue.close()
        proxy.stop()

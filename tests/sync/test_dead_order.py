"""Order per entity when operations die (DESIGN.md, "Order"): a failed operation blocks
only its own entity, and blocks it.

A hypothesis state machine drives a real queue and the real executor against the wire
protocol's model server (tests.protocol.wire_app, in process) over random sequences of
enqueues (create / update / delete on a few entities, coalescing on), permanent failures
(422), transient ones (503: dead after the policy's attempts), syncs, ``retry_dead``,
``discard`` (with and without the tail) and ``on_dead`` answers (`DeadTail`). It keeps a
model of what each entity made, in order, and checks every operation the server
receives against it, in the order received: it is the earliest of its entity that is
neither delivered nor discarded (nothing overtakes anything, modulo coalescing, which
the model follows from what enqueue returns), and its entity has no dead head (nothing is
sent while an earlier operation of the entity is dead or pending).
"""

from __future__ import annotations

import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from pigeon.core.operation import Operation, OpStatus
from pigeon.core.retry import RetryPolicy
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.protocol.inprocess import InProcessTransport
from pigeon.sync.classify import ReplyOutcome
from pigeon.sync.events import DeadTail, SyncCallbacks
from pigeon.sync.executor import Executor
from tests.clocks import FakeClock
from tests.protocol.wire_app import Fault, WireState, create_wire_app

ENTITIES = ("a", "b")
MAX_ATTEMPTS = 2
POLICY = RetryPolicy(base=0.01, factor=1.0, cap=0.01, max_attempts=MAX_ATTEMPTS)
# (type, method): creates and full updates fold (PUT), a PATCH never does.
KINDS = {
    "create": ("create", "PUT"),
    "put": ("update", "PUT"),
    "patch": ("update", "PATCH"),
    "delete": ("delete", "DELETE"),
}


class EntityOrder(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="pigeon-order-"))
        self.made: dict[str, list[str]] = {e: [] for e in ENTITIES}  # keys, made order
        self.done: set[str] = set()  # delivered or discarded
        self.blocked: dict[str, str] = {}  # entity -> the key of its dead head
        self.attempts: defaultdict[str, int] = defaultdict(int)
        self.ids: dict[str, str] = {}  # key -> operation id
        self.answer = DeadTail.HOLD  # what on_dead returns
        self.checked = 0  # receipts of the server checked so far
        self.n = 0

    @initialize(batch=st.booleans())
    def start(self, batch: bool) -> None:
        self.clock = FakeClock()
        self.state = WireState()
        self.queue = OfflineQueue(
            self.dir / "edge.db", QueueOptions(retry_policy=POLICY), now=self.clock
        )
        self.transport = InProcessTransport(
            create_wire_app(self.state), batch=batch, lifespan=False
        )
        callbacks = SyncCallbacks(on_dead=self._on_dead)
        self.executor = Executor(self.queue, self.transport, callbacks, clock=self.clock)

    def _on_dead(self, op: Operation, outcome: ReplyOutcome) -> DeadTail:
        return self.answer

    def teardown(self) -> None:
        if hasattr(self, "queue"):
            self.transport.close()
            self.queue.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model -----------------------------------------------------------------------

    def _waiting(self, entity: str) -> list[str]:
        """The entity's keys neither delivered nor discarded, in the order made."""
        return [k for k in self.made[entity] if k not in self.done]

    def _dies(self, entity: str, key: str) -> None:
        if self.answer is DeadTail.HOLD:
            self.blocked[entity] = key
        elif self.answer is DeadTail.RELEASE:
            self.done.add(key)
        else:  # DISCARD: it and everything held behind it (never sent)
            self.done.update(self._waiting(entity))

    def _check_receipts(self) -> None:
        for entity, key, status in self.state.received[self.checked :]:
            self.checked += 1
            assert entity not in self.blocked, f"{key} sent while {entity}'s head is dead"
            waiting = self._waiting(entity)
            assert waiting, f"{key} sent, but nothing of {entity} waits"
            assert key == waiting[0], f"{key} overtook {waiting[0]} on {entity}"
            self.attempts[key] += 1
            if status < 300:
                self.done.add(key)
            elif status == 422 or self.attempts[key] >= MAX_ATTEMPTS:
                self._dies(entity, key)
            else:
                assert status == 503, status

    # -- rules ---------------------------------------------------------------------------

    @rule(entity=st.sampled_from(ENTITIES), kind=st.sampled_from(sorted(KINDS)))
    def enqueue(self, entity: str, kind: str) -> None:
        type_, method = KINDS[kind]
        self.n += 1
        op = self.queue.enqueue(
            type_, entity, {"n": self.n}, endpoint=f"/things/{entity}", method=method
        )
        waiting = self._waiting(entity)
        tail = waiting[-1] if waiting else None
        if op.status is OpStatus.COALESCED:  # it and the tail cancelled out
            assert tail is not None and tail != self.blocked.get(entity)
            self.made[entity].remove(tail)
        elif tail is not None and self.ids[tail] == op.id:  # folded into the tail
            assert tail != self.blocked.get(entity), "folded into a dead operation"
        else:
            self.made[entity].append(op.idempotency_key)
            self.ids[op.idempotency_key] = op.id

    @rule(entity=st.sampled_from(ENTITIES), status=st.sampled_from([422, 503]))
    def fail_next(self, entity: str, status: int) -> None:
        with self.state.lock:
            self.state.faults[entity].append(Fault(status=status))

    @rule(answer=st.sampled_from(list(DeadTail)))
    def on_dead_answers(self, answer: DeadTail) -> None:
        self.answer = answer

    @rule()
    def sync(self) -> None:
        for _ in range(500):
            self.clock.advance(1.0)  # past every backoff
            report = self.executor.run_once(100)
            self._check_receipts()
            if report.taken == 0:
                return
        raise AssertionError("the queue never settled")

    @precondition(lambda self: bool(self.blocked))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        entity = data.draw(st.sampled_from(sorted(self.blocked)))
        key = self.blocked.pop(entity)
        back = self.queue.retry_dead(self.ids[key])
        assert back.status is OpStatus.PENDING and back.idempotency_key == key
        self.attempts[key] = 0

    @precondition(lambda self: bool(self.blocked))
    @rule(data=st.data(), with_tail=st.booleans())
    def discard(self, data: st.DataObject, with_tail: bool) -> None:
        entity = data.draw(st.sampled_from(sorted(self.blocked)))
        key = self.blocked.pop(entity)
        dropped = self.queue.discard(self.ids[key], with_tail=with_tail)
        self.done.add(key)
        expected = self._waiting(entity) if with_tail else []
        assert [op.idempotency_key for op in dropped] == expected
        self.done.update(expected)

    # -- what the queue says -------------------------------------------------------------

    @invariant()
    def the_queue_holds_what_the_model_holds(self) -> None:
        dead = self.queue.dead_letters()
        assert {op.idempotency_key for op in dead} == set(self.blocked.values())
        live = self.queue.pending
        by_entity: dict[str, list[str]] = {e: [] for e in ENTITIES}
        for op in sorted([*live, *dead], key=lambda op: op.seq):
            by_entity[op.entity].append(op.idempotency_key)
        # Every entity's operations in the order made: a retried one in its own place.
        assert by_entity == {e: self._waiting(e) for e in ENTITIES}
        held = {
            key
            for entity, head in self.blocked.items()
            for key in self._waiting(entity)
            if key != head
        }
        assert {op.idempotency_key for op in live if op.held} == held
        stats = self.queue.stats()
        assert (stats.held, stats.dead) == (len(held), len(self.blocked))


EntityOrder.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_order_per_entity_through_deaths_retries_and_discards = EntityOrder.TestCase


def _dead_create_with_updates(tmp_path: Path, answer: object) -> tuple[WireState, OfflineQueue]:
    """A create that the server refuses (422) with two updates of its entity made after
    it and one of another entity; one sync with ``on_dead`` answering ``answer``."""
    state = WireState()
    state.faults["x"].append(Fault(status=422))
    tmp_path.mkdir()
    queue = OfflineQueue(tmp_path / "edge.db", QueueOptions(retry_policy=POLICY))
    for type_, entity, method in [
        ("create", "x", "PUT"),
        ("update", "x", "PATCH"),
        ("update", "x", "PATCH"),
        ("update", "y", "PUT"),
    ]:
        queue.enqueue(type_, entity, {"v": 1}, endpoint=f"/things/{entity}", method=method)
    with InProcessTransport(create_wire_app(state), lifespan=False) as transport:
        executor = Executor(queue, transport, SyncCallbacks(on_dead=lambda op, o: answer))
        while executor.run_once(100).taken:
            pass
    return state, queue


def test_on_dead_holds_by_default_and_for_an_answer_it_does_not_know(tmp_path: Path) -> None:
    for n, answer in enumerate([None, DeadTail.HOLD, "hold", "drop it", ["x"]]):
        state, queue = _dead_create_with_updates(tmp_path / str(n), answer)
        with queue:
            assert [e for e, _, _ in state.received] == ["x", "y"]  # the updates wait
            assert queue.stats().held == 2 and len(queue.dead_letters()) == 1


def test_on_dead_may_release_the_tail_or_discard_it(tmp_path: Path) -> None:
    state, queue = _dead_create_with_updates(tmp_path / "release", DeadTail.RELEASE)
    with queue:
        assert [e for e, _, _ in state.received] == ["x", "y", "x", "x"]
        assert queue.dead_letters() == [] and queue.pending == []
    state, queue = _dead_create_with_updates(tmp_path / "discard", "discard-tail")
    with queue:
        assert [e for e, _, _ in state.received] == ["x", "y"]
        assert queue.dead_letters() == [] and queue.pending == []

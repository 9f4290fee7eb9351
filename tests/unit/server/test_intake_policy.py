"""The intake's policy on the in-memory idempotency store: no database, milliseconds.

The same rules the integration tests check on SQLite and PostgreSQL (claim, replay,
mismatch, in progress, validation before the claim, a batch stopping at a transient
failure, release on 5xx), run on ``MemoryIdempotencyStore``: what is tested here is the
policy in ``Intake``, not a backend."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from pigeon.exceptions import ValidationError
from pigeon.server.idempotency_memory import MemoryDatabase, MemoryIdempotencyStore
from pigeon.server.intake import Intake, IntakeContext
from pigeon.server.operations import OperationRequest
from tests.clocks import FakeClock

SCHEMA = {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}


class Effects:
    """A handler that counts its runs per key and answers what it is told."""

    def __init__(self, status: int = 201) -> None:
        self.status = status
        self.runs: list[str] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def __call__(self, ctx: IntakeContext) -> tuple[int, Any]:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(5)
        self.runs.append(ctx.idempotency_key)
        if self.status >= 500:
            raise RuntimeError("boom")
        return self.status, {"id": ctx.body["id"], "run": len(self.runs)}


def _intake(handler: Effects, now: Callable[[], float] = time.time) -> Intake:
    intake = Intake(MemoryDatabase(), now=now)
    intake.add_operation("POST", "/notes", handler, request_schema=SCHEMA)
    return intake


def op(key: str, note: str = "1") -> OperationRequest:
    return OperationRequest("POST", "/notes", {"id": note}, key, f"op-{key}")


def test_the_intake_picks_the_memory_store_for_a_memory_database() -> None:
    intake = _intake(Effects())
    assert isinstance(intake.store, MemoryIdempotencyStore)
    assert intake.store.single_writer  # one writer: group commit by default


def test_a_key_runs_once_and_its_retry_replays_the_stored_answer() -> None:
    effects = Effects()
    intake = _intake(effects)
    first = intake.execute("alice", op("k"))
    again = intake.execute("alice", op("k"))
    assert first.status == 201 and not first.replayed
    assert again.status == 201 and again.replayed and again.body == first.body
    assert effects.runs == ["k"]


def test_keys_are_scoped_by_principal() -> None:
    effects = Effects()
    intake = _intake(effects)
    intake.execute("alice", op("k"))
    assert not intake.execute("bob", op("k")).replayed
    assert effects.runs == ["k", "k"]


def test_the_same_key_for_another_request_is_422() -> None:
    effects = Effects()
    intake = _intake(effects)
    intake.execute("alice", op("k", "1"))
    refused = intake.execute("alice", op("k", "2"))
    assert refused.status == 422 and effects.runs == ["k"]


def test_validation_refuses_before_the_claim_and_stores_nothing() -> None:
    effects = Effects()
    intake = _intake(effects)
    bad = OperationRequest("POST", "/notes", {"id": 7}, "k", "op-k")
    assert intake.execute("alice", bad).status == 400
    with intake.store.transaction() as tx:
        assert intake.store.get(tx, "alice", "k") is None
    assert intake.execute("alice", op("k")).status == 201  # the corrected one, same key
    assert effects.runs == ["k"]


def test_a_validation_error_from_the_handler_gives_the_key_back() -> None:
    calls: list[int] = []

    def picky(ctx: IntakeContext) -> tuple[int, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise ValidationError("not yet")
        return 201, {"ok": True}

    intake = Intake(MemoryDatabase())
    intake.add_operation("POST", "/notes", picky)
    assert intake.execute("alice", op("k")).status == 400
    assert intake.execute("alice", op("k")).status == 201


def test_a_5xx_releases_the_key_and_a_4xx_is_stored() -> None:
    failing = Effects(status=500)
    intake = _intake(failing)
    assert intake.execute("alice", op("k")).status == 500
    with intake.store.transaction() as tx:
        assert intake.store.get(tx, "alice", "k") is None  # a retry runs
    refusing = Effects(status=404)
    intake = _intake(refusing)
    assert intake.execute("alice", op("k")).status == 404
    assert intake.execute("alice", op("k")).replayed
    assert refusing.runs == ["k"]


def test_a_duplicate_in_progress_is_answered_409_at_once() -> None:
    effects = Effects()
    effects.gate = threading.Event()
    intake = _intake(effects)
    results: list[Any] = []
    original = threading.Thread(target=lambda: results.append(intake.execute("alice", op("k"))))
    original.start()
    try:
        assert effects.entered.wait(5)
        duplicate = intake.execute("alice", op("k"))
        assert duplicate.status == 409 and duplicate.transient
        assert int(dict(duplicate.headers)["retry-after"]) >= 1
    finally:
        effects.gate.set()
        original.join(5)
    assert results[0].status == 201 and effects.runs == ["k"]
    assert intake.execute("alice", op("k")).replayed


def test_a_batch_stops_at_the_first_transient_result() -> None:
    calls: list[str] = []

    def handler(ctx: IntakeContext) -> tuple[int, Any]:
        calls.append(ctx.idempotency_key)
        if ctx.idempotency_key == "b":
            return 503, {"later": True}
        return 201, {"id": ctx.body["id"]}

    intake = Intake(MemoryDatabase())
    intake.add_operation("POST", "/notes", handler)
    results = intake.execute_batch("alice", [op("a"), op("b"), op("c")])
    assert [r.status for r in results] == [201, 503]
    assert calls == ["a", "b"]  # c never overtook b
    with intake.store.transaction() as tx:
        assert intake.store.get(tx, "alice", "a") is not None  # committed
        assert intake.store.get(tx, "alice", "b") is None  # released: its retry runs


def test_a_group_applies_each_request_as_alone() -> None:
    effects = Effects()
    intake = _intake(effects)
    results = intake.execute_group([("alice", op("a")), ("alice", op("a")), ("bob", op("b"))])
    assert [r.status for r in results] == [201, 201, 201]
    assert [r.replayed for r in results] == [False, True, False]
    assert effects.runs == ["a", "b"]


def test_purge_drops_responses_then_claims() -> None:
    now = FakeClock(1000.0)
    effects = Effects()
    intake = _intake(effects, now=now)
    intake.execute("alice", op("k"))
    now.advance(intake.options.policy.response_retention + 1)
    assert intake.purge() == (1, 0)
    applied = intake.execute("alice", op("k"))
    assert applied.status == 200 and "already" in applied.body_text  # the claim lives on
    now.advance(intake.options.policy.claim_retention)
    assert intake.purge() == (0, 1)
    assert not intake.execute("alice", op("k")).replayed and effects.runs == ["k", "k"]


def test_a_memory_transaction_that_fails_leaves_nothing() -> None:
    db = MemoryDatabase()
    with pytest.raises(RuntimeError), db.transaction() as tx:
        tx.put("t", 1, {"a": 1})
        raise RuntimeError("rolled back")
    assert db.tables["t"] == {}
    with db.transaction() as tx:
        tx.put("t", 1, {"a": 1})
        with pytest.raises(RuntimeError), tx.savepoint():
            tx.put("t", 1, {"a": 2})
            raise RuntimeError("to the savepoint")
    assert db.tables["t"] == {1: {"a": 1}}

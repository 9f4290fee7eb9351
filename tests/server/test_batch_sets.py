"""The set-based batch path (`pigeon.server.intake_set`): a route's set handler applies many
operations at once, and every answer, row and stored response is what the per-operation
path gives, whatever the batch holds (replays, mismatches, expired responses, a key twice,
an entity twice, refusals before the claim, stored 4xx, a transient failure mid-batch)."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, cast

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pigeon.core.clock import HLCTimestamp, HybridLogicalClock
from pigeon.core.wire import canonical_json
from pigeon.exceptions import Contention
from pigeon.reference.notes import (
    NOTE_AT_ID_SCHEMA,
    NOTE_SCHEMA,
    create_note,
    current_note,
    delete_note,
    patch_note,
    replace_note,
    validate_note,
)
from pigeon.reference.notes_many import create_notes, delete_notes, patch_notes, replace_notes
from pigeon.reference.schema import attach
from pigeon.server import idempotency_sets, intake_set, operations
from pigeon.server.idempotency import ClaimOutcome
from pigeon.server.idempotency_sets import Answer, Ask
from pigeon.server.idempotency_stores import set_claims
from pigeon.server.intake import Intake, IntakeContext, OperationRequest
from pigeon.server.operations import KEPT_BODY_JSON, HandlerResult
from pigeon.server.results import OpResult
from pigeon.storage.base import Database, Tx
from pigeon.storage.crypto import Keyring, generate_key
from pigeon.storage.errors import duplicate_row
from pigeon.storage.sealed import NOTE_DATA, RESPONSE_BODY
from pigeon.storage.server import open_server_db
from tests.clocks import FakeClock

from .conftest import SERVER_START, failing_handler

DAY = 24 * 3600.0


def intake_on(notes_db: Database, server_clock: FakeClock, many: Any = create_notes) -> Intake:
    """The notes' writes as the reference app declares them, ``many`` the create's set
    handler (None: every operation the per-operation way, the replaces' and deletes' too),
    and two failing routes."""
    wall = HybridLogicalClock("server", wall=lambda: int(server_clock() * 1000))
    intake = Intake(notes_db, now=server_clock, clock=wall)
    create = {"request_schema": NOTE_SCHEMA, "validate": validate_note, "on_replay": current_note}
    intake.add_operation("POST", "/notes", create_note, many=many, **create)
    at_id = create | {"request_schema": NOTE_AT_ID_SCHEMA}
    writes = (None,) * 3 if many is None else (replace_notes, patch_notes, delete_notes)
    deletes: dict[str, Any] = {"on_replay": current_note}
    intake.add_operation("PUT", "/notes/{id}", replace_note, many=writes[0], **at_id)
    intake.add_operation("PATCH", "/notes/{id}", patch_note, many=writes[1], **at_id)
    intake.add_operation("DELETE", "/notes/{id}", delete_note, many=writes[2], **deletes)
    intake.add_operation("POST", "/refuse", failing_handler("4xx"))
    intake.add_operation("POST", "/crash", failing_handler("raise"))
    return intake


class Pair:
    """The same operations through the set path and the per-operation path, each under a
    principal of its own in ``db``, with one clock: what each answers and stores (its
    notes, claims and ledger rows) is compared."""

    def __init__(self, notes_db: Database) -> None:
        self.db = notes_db
        self.clock = FakeClock(SERVER_START)
        self.set = intake_on(notes_db, self.clock)
        self.one = intake_on(notes_db, self.clock, many=None)

    def batch(self, principal: str, ops: Sequence[OperationRequest]) -> list[OpResult]:
        got = self.set.execute_batch(f"set-{principal}", list(ops))
        want = self.one.execute_batch(f"one-{principal}", list(ops))
        assert [_answer(r) for r in got] == [_answer(r) for r in want]
        return got

    def same_state(self, principal: str) -> None:
        got, want = (_state(self.db, f"{p}-{principal}") for p in ("set", "one"))
        assert got == want


def _answer(result: OpResult) -> tuple[Any, ...]:
    body = result.body_text
    if result.status >= 500:  # each failure's own error id
        body = re.sub(r"[0-9a-f]{16}", "<error id>", body)
    return (result.status, body, result.headers, result.replayed, result.transient)


def _state(notes_db: Database, principal: str) -> dict[str, Any]:
    """Notes, claims (their stored answers decoded) and the ledger in per-entity order,
    the principal left out."""
    mark = ":p" if notes_db.backend == "sqlite" else "%(p)s"
    with notes_db.transaction() as tx:
        state = {}
        for table, order, row in (
            ("ref_notes", "id", _note),
            ("pigeon_idempotency_claims", "idem_key", _claim),
            ("ref_effect_ledger", "entity, seq", _entry),
        ):
            query = f"SELECT * FROM {table} WHERE principal = {mark} ORDER BY {order}"
            rows = tx.sql(query, {"p": principal}).fetchall()
            state[table] = [
                {k: v for k, v in row(dict(r), tx).items() if k != "principal"} for r in rows
            ]
    return state


def _entry(row: dict[str, Any], tx: Tx) -> dict[str, Any]:
    del row["seq"]  # the order within an entity is compared, not the numbers
    return row


def _note(row: dict[str, Any], tx: Tx) -> dict[str, Any]:
    row["data"] = tx.cipher.open(row["data"], *NOTE_DATA.ad_of(row))
    return row


def _claim(row: dict[str, Any], tx: Tx) -> dict[str, Any]:
    # The tokens differ by design, sealed values by their nonces; the stored headers'
    # text is compared as it is (one encoder for both paths).
    row["lock_token"] = row["lock_token"] is not None
    if row["response_body"] is not None:
        row["response_body"] = tx.cipher.open(row["response_body"], *RESPONSE_BODY.ad_of(row))
    return row


class Counted:
    """The real database, its transactions counting the statements run in them and the
    characters of each one's parameters."""

    def __init__(self, inner: Database) -> None:
        self.inner, self.backend, self.cipher = inner, inner.backend, inner.cipher
        self.statements: list[str] = []
        self.sizes: list[int] = []

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self.inner.transaction() as tx:
            yield cast(Tx, _CountingTx(tx, self.statements, self.sizes))

    @contextlib.contextmanager
    def reading(self) -> Iterator[Tx]:
        with self.inner.reading() as tx:
            yield cast(Tx, _CountingTx(tx, self.statements, self.sizes))

    def close(self) -> None:
        self.inner.close()


class _CountingTx:
    """Each statement told by its name: a named one's (run by name, or by its text, as a
    statement sent with the next round trip is), else its text's first word."""

    def __init__(self, inner: Tx, seen: list[str], sizes: list[int]) -> None:
        self.inner, self.seen, self.sizes = inner, seen, sizes
        self.backend, self.cipher = inner.backend, inner.cipher
        queries: dict[str, str] = getattr(inner, "queries", {})
        self.names = {text: name for name, text in queries.items()}

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not callable(method):
            return method

        def counted(*args: Any) -> Any:
            said = str(args[0]) if args else ""
            self.seen.append(
                name if name == "savepoint" else self.names.get(said) or said.split()[0]
            )
            params = args[1] if len(args) > 1 and isinstance(args[1], dict) else {}
            self.sizes.append(sum(len(str(value)) for value in params.values()))
            return method(*args)

        return counted


@pytest.fixture
def pair(notes_db: Database) -> Pair:
    return Pair(notes_db)


def stamp(n: int) -> str:
    return HLCTimestamp(1_700_000_000_000 + n, 0, "device").encode()


def create(key: str, note_id: str | None, n: int = 0, **extra: Any) -> OperationRequest:
    body: dict[str, Any] = {"v": n, **extra} if note_id is None else {"id": note_id, "v": n}
    return OperationRequest("POST", "/notes", body, key, f"op-{key}", clock=stamp(n))


# -- the path, case by case ---------------------------------------------------------------


def test_a_batch_of_creates_is_a_few_statements_with_the_answers_of_one_by_one(
    pair: Pair,
) -> None:
    ops = [create(f"k{i}", f"n{i}", i) for i in range(50)]
    results = pair.batch("p", ops)
    assert [r.status for r in results] == [201] * 50
    assert results[7].body["data"] == {"v": 7}
    pair.same_state("p")
    replays = pair.batch("p", ops)  # answered from the claims' rows, read at once
    assert all(r.replayed for r in replays)
    pair.same_state("p")


def test_the_set_path_claims_writes_and_stores_a_batch_in_four_statements(
    notes_db: Database,
) -> None:
    counted = Counted(notes_db)
    intake = intake_on(cast(Database, counted), FakeClock(SERVER_START))
    ops = [create(f"k{i}", f"n{i}", i) for i in range(100)]
    assert [r.status for r in intake.execute_batch("p", list(ops))] == [201] * 100
    # The keys read, the notes, the ledger rows, the claims with their answers: one
    # statement each, each claim's row written once.
    assert counted.statements == [
        "claims_get_many", "--", "--", "claims_store_many"
    ]  # fmt: skip
    counted.statements.clear()
    assert all(r.replayed for r in intake.execute_batch("p", list(ops)))
    # Answered from the rows read; then the replay hooks' read-only transaction, as on the
    # one-by-one way.
    assert counted.statements[0] == "claims_get_many"
    assert "claims_store_many" not in counted.statements
    assert "replay_read_only" in counted.statements[1:]


class Opened(Counted):
    """Counted, its transactions' ends told in ``events``; the first ``victims`` of them
    aborted at their end as a deadlock's victim (nothing of them committed)."""

    def __init__(self, inner: Database, events: list[str], victims: int = 0) -> None:
        super().__init__(inner)
        self.events = events
        self.victims = victims

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        self.events.append("begin")
        try:
            with super().transaction() as tx:
                yield tx
                if self.victims:
                    self.victims -= 1
                    raise Contention("deadlock detected")
        finally:
            self.events.append("end")


@pytest.mark.parametrize("victims", [0, 1])
def test_a_batch_is_routed_checked_and_fingerprinted_before_its_transaction(
    notes_db: Database, monkeypatch: pytest.MonkeyPatch, victims: int
) -> None:
    # Work that needs no database stays out of the transaction: on SQLite it holds the
    # write lock that every process serving the file waits for. A transaction run again
    # (a deadlock's victim) applies the same plan.
    events: list[str] = []
    opened = Opened(notes_db, events, victims)
    intake = intake_on(cast(Database, opened), FakeClock(SERVER_START))
    step, digest = intake_set._step, operations.fingerprint_canonical

    def stepped(*args: Any) -> Any:
        events.append("step")
        return step(*args)

    def fingerprinted(*args: str) -> str:
        events.append("fingerprint")
        return digest(*args)

    monkeypatch.setattr(intake_set, "_step", stepped)
    monkeypatch.setattr(operations, "fingerprint_canonical", fingerprinted)
    ops = [create(f"k{i}", f"n{i}", i) for i in range(20)]
    results = intake.execute_batch("p", list(ops))
    assert [(r.status, r.body["data"]) for r in results] == [(201, {"v": i}) for i in range(20)]
    transactions = ["begin", "end"] * (1 + victims)
    assert events == ["step", "fingerprint"] * 20 + transactions
    # Set-wise each time: the claims, the notes, the ledger rows, the answers.
    assert opened.statements == ["claims_get_many", "--", "--", "claims_store_many"] * (1 + victims)
    with notes_db.transaction() as tx:
        kept = tx.sql("SELECT count(*) AS n FROM ref_notes WHERE principal = 'p'").fetchone()
    assert kept["n"] == 20


def test_the_claims_of_a_batch_count_what_they_store(notes_db: Database) -> None:
    # On each backend's own transaction (each counts its own way): a count that came out
    # short would give every batch up to the one-by-one way, with the same answers.
    claims = set_claims(intake_on(notes_db, FakeClock(SERVER_START)).store)
    assert claims is not None
    asks = [Ask(f"k{i}", "f", "POST", "/notes", f"op{i}") for i in range(3)]
    with notes_db.transaction() as tx:
        found = claims.read_many(tx, "p", asks)
        assert found.free.keys() == {"k0", "k1", "k2"} and found.held == {}
        answers: list[Answer] = [(ask, 201, [], "{}") for ask in asks[:2]]
        assert claims.store_many(tx, "p", answers, found.now) == 2
    # k1 has its row by now (another transaction's, say): it keeps it, and the call says
    # so, by a short count or by failing as a duplicate key; either gives the batch up.
    again: list[Answer] = [(asks[1], 201, [], "{}"), (asks[2], 201, [], "{}")]
    if notes_db.backend == "sqlite":
        with notes_db.transaction() as tx:
            assert claims.store_many(tx, "p", again, found.now) == 1
    else:
        with pytest.raises(psycopg.Error) as raised, notes_db.transaction() as tx:
            claims.store_many(tx, "p", again, found.now)
        assert duplicate_row(raised.value)
    with notes_db.transaction() as tx:
        found = claims.read_many(tx, "p", asks)
    assert found.free.keys() == (set() if notes_db.backend == "sqlite" else {"k2"})
    assert all(d is not None and d.outcome is ClaimOutcome.REPLAY for d in found.held.values())
    assert found.held.keys() >= {"k0", "k1"}


def test_large_bodies_go_to_the_set_handler_a_bounded_amount_at_a_time(
    notes_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = Counted(notes_db)
    intake = intake_on(cast(Database, counted), FakeClock(SERVER_START))
    ops = [create(f"k{i}", f"n{i}", i) for i in range(6)]  # bodies of one length
    monkeypatch.setattr(intake_set, "SEGMENT_BYTES", 2 * len(canonical_json(ops[0].body)))
    assert [r.status for r in intake.execute_batch("p", list(ops))] == [201] * 6
    # One read of the keys; then two bodies per call: notes, ledger, claims and answers.
    assert counted.statements == ["claims_get_many"] + [
        "--", "--", "claims_store_many"
    ] * 3  # fmt: skip


def test_no_statement_carries_more_than_a_segment_of_a_large_batch(notes_db: Database) -> None:
    # 40 notes of 20,000 characters, created then replaced: 800,000 characters a batch.
    counted = Counted(notes_db)
    intake = intake_on(cast(Database, counted), FakeClock(SERVER_START))
    big = "x" * 20_000
    creates = [create(f"c{i}", f"n{i}", i, text=big) for i in range(40)]
    creates = [
        OperationRequest(o.method, o.path, {"id": f"n{i}", "text": big}, o.key, o.operation_id)
        for i, o in enumerate(creates)
    ]
    puts = [_op("put", f"p{i}", f"n{i}", i, i) for i in range(40)]
    puts = [OperationRequest(o.method, o.path, {"text": big}, o.key, o.operation_id) for o in puts]
    assert [r.status for r in intake.execute_batch("p", creates)] == [201] * 40
    assert [r.status for r in intake.execute_batch("p", puts)] == [200] * 40
    assert "claims_store_many" in counted.statements  # the set path ran
    # A segment (256 KiB) and its JSON escapes in a statement, never the whole batch.
    assert max(counted.sizes) < 400_000


@pytest.mark.parametrize("segment", [intake_set.SEGMENT_BYTES, 1])
def test_a_batch_split_into_many_set_calls_answers_as_one_by_one(
    pair: Pair, monkeypatch: pytest.MonkeyPatch, segment: int
) -> None:
    monkeypatch.setattr(intake_set, "SEGMENT_BYTES", segment)
    ops = [create(f"k{i}", f"n{i % 3}", i) for i in range(9)]  # each note thrice
    ops += [_op("put", f"p{i}", f"n{i % 3}", i, i) for i in range(6)]
    ops += [_op("delete", "d0", "n1", 0, 20), create("k9", "n1", 21)]
    pair.batch("p", ops)
    pair.same_state("p")


def test_an_entity_or_key_twice_and_a_live_note_run_the_one_by_one_way_in_order(
    pair: Pair,
) -> None:
    pair.batch("p", [create("old", "live")])
    ops = [
        create("a", "x", 1),
        create("b", "x", 2),  # the same note again: 409 with the first one's note
        create("a", "x", 1),  # the same key again: the first one's answer, replayed
        create("a", "x", 9),  # the same key, another body: 422
        create("c", "live", 3),  # a live note: 409 with it
        OperationRequest("POST", "/notes", {"id": ["no"]}, "d", "op-d", clock=stamp(4)),
        OperationRequest("DELETE", "/notes/x", None, "e", "op-e", clock=stamp(5)),
        create("f", "x", 6),  # after its delete: a new life, version 3
    ]
    results = pair.batch("p", ops)
    assert [r.status for r in results] == [201, 409, 201, 422, 409, 400, 200, 201]
    assert results[2].replayed and results[7].body["version"] == 3
    pair.same_state("p")


def write(key: str, note_id: str, n: int | None, if_match: str | None = None) -> OperationRequest:
    """A replace of note ``note_id`` with ``{"v": n}``, or its delete (``n`` None)."""
    method, body = ("DELETE", None) if n is None else ("PUT", {"v": n})
    path = f"/notes/{note_id}"
    return OperationRequest(method, path, body, key, f"op-{key}", stamp(n or 0), if_match)


def test_replaces_and_deletes_go_set_wise_and_what_they_refuse_one_by_one(pair: Pair) -> None:
    pair.batch("p", [create(f"c{i}", f"n{i}", i) for i in range(6)])
    ops = [
        write("u0", "n0", 10),
        write("u1", "n1", 11, if_match="1"),
        write("u2", "n2", 12, if_match="7"),  # 412 with the note
        write("u3", "nowhere", 13),  # 404
        write("d4", "n4", None),
        write("d5", "n5", None, if_match="1"),
        write("u6", "n0", 16),  # the same note again: after the first, version 3
        write("d7", "n4", None),  # deleted already: 404
    ]
    results = pair.batch("p", ops)
    assert [r.status for r in results] == [200, 200, 412, 404, 200, 200, 200, 404]
    assert results[6].body["version"] == 3 and results[4].body["deleted"] is True
    pair.same_state("p")
    assert all(r.replayed for r in pair.batch("p", ops))


def test_patches_merge_into_the_note_as_one_by_one(pair: Pair) -> None:
    pair.batch("p", [create(f"c{i}", f"n{i}", i) for i in range(3)])

    def patch(key: str, note_id: str, body: Any, if_match: str | None = None) -> OperationRequest:
        path = f"/notes/{note_id}"
        return OperationRequest("PATCH", path, body, key, f"op-{key}", stamp(5), if_match)

    ops = [
        patch("a", "n0", {"t": {"x": 1}}),
        patch("b", "n1", {"v": None}, if_match="1"),  # removes v
        patch("c", "n2", {"t": 1}, if_match="9"),  # 412
        patch("d", "n0", {"t": {"y": 2}}),  # the same note again: merged over the first
        patch("e", "nowhere", {"t": 1}),  # 404
    ]
    results = pair.batch("p", ops)
    assert [r.status for r in results] == [200, 200, 412, 200, 404]
    assert results[3].body["data"] == {"v": 0, "t": {"x": 1, "y": 2}}
    assert results[1].body["data"] == {}
    pair.same_state("p")


def test_patches_go_set_wise(notes_db: Database) -> None:
    counted = Counted(notes_db)
    intake = intake_on(cast(Database, counted), FakeClock(SERVER_START))
    intake.execute_batch("p", [create(f"c{i}", f"n{i}", i) for i in range(20)])
    counted.statements.clear()
    ops = [
        OperationRequest("PATCH", f"/notes/n{i}", {"t": i}, f"p{i}", f"op-p{i}", stamp(i))
        for i in range(20)
    ]
    assert [r.status for r in intake.execute_batch("p", ops)] == [200] * 20
    # The keys read; the notes locked, written, their ledger rows; the claims and answers.
    assert counted.statements == [
        "claims_get_many", "--", "--", "--", "claims_store_many"
    ]  # fmt: skip


def test_a_transient_failure_mid_batch_stops_it_there_with_nothing_after_it(pair: Pair) -> None:
    ops = [
        create("a", "a"),
        OperationRequest("POST", "/refuse", {"id": "r"}, "r", "op-r", clock=stamp(1)),
        OperationRequest("POST", "/crash", {"id": "c"}, "c", "op-c", clock=stamp(2)),
        create("b", "b"),
    ]
    results = pair.batch("p", ops)
    assert [r.status for r in results] == [201, 409, 500]
    assert results[-1].transient
    pair.same_state("p")
    with pair.db.transaction() as tx:
        assert tx.sql("SELECT id FROM ref_notes WHERE id = 'b'").fetchall() == []


def test_expired_answers_and_claims_are_answered_as_one_by_one(pair: Pair) -> None:
    ops = [create(f"k{i}", f"n{i % 3}", i) for i in range(6)]
    pair.batch("p", ops)
    pair.clock.advance(DAY + 1)  # the stored answers are purged: "already applied"
    pair.set.purge()
    pair.one.purge()
    pair.batch("p", ops)
    pair.same_state("p")
    pair.clock.advance(31 * DAY)  # the claims have expired: their keys run again
    pair.batch("p", ops)
    pair.same_state("p")


def test_a_create_without_an_id_gets_a_new_one(pair: Pair) -> None:
    results = pair.set.execute_batch("p", [create("a", None), create("b", None, 1)])
    assert [r.status for r in results] == [201, 201]
    ids = {r.body["id"] for r in results}
    assert len(ids) == 2 and all(len(i) == 32 for i in ids)
    assert [r.body["data"] for r in results] == [{"v": 0}, {"v": 1}]  # the body, whole


def test_a_note_body_is_stored_as_one_by_one_whatever_repeats_its_id(pair: Pair) -> None:
    """The set handler cuts a note's data out of the body's text (encoded once for its
    fingerprint): a nested object or a key that repeats the id's text makes it encode
    again, and every one is stored as the one-note handler stores it."""
    bodies: list[dict[str, Any]] = [
        {"id": "n1", "v": 1},
        {"id": "n2"},
        {"id": "n3", "inner": {"id": "n3"}, "z": [{"id": "n3"}]},
        {'a"id': "n4", "id": "n4", "v": "é"},
        {"body": "b", "id": "n5", "title": 'say "id":"n5"'},
        {"id": "n6", "v": "x" * KEPT_BODY_JSON},  # not kept: encoded again
    ]
    ops = [
        OperationRequest("POST", "/notes", body, f"k{i}", f"op-k{i}", clock=stamp(i))
        for i, body in enumerate(bodies)
    ]
    results = pair.batch("p", ops)
    assert [r.status for r in results] == [201] * len(bodies)
    replaces = [
        OperationRequest("PUT", f"/notes/{b['id']}", {**b, "v": 9}, f"r{i}", f"op-r{i}")
        for i, b in enumerate(bodies)
    ]
    pair.batch("p", replaces)
    pair.same_state("p")


def test_a_handler_is_given_the_text_its_body_was_fingerprinted_by(notes_db: Database) -> None:
    """``IntakeContext.body_json`` is ``canonical_json(body)`` on the set path and the
    per-operation path alike, whatever the key order and spacing the body came in; a body
    whose text is longer than ``KEPT_BODY_JSON`` is not kept (a batch holds its operations
    until they are applied: their texts would grow a large batch's server by its size)."""
    seen: list[tuple[str | None, Any]] = []

    def one(ctx: IntakeContext) -> HandlerResult:
        seen.append((ctx.body_json, ctx.body))
        return 201, {}

    def many(tx: Tx, items: Sequence[IntakeContext]) -> list[HandlerResult | None]:
        return [one(ctx) for ctx in items]

    intake = Intake(notes_db)
    intake.add_operation("POST", "/set", one, many=many)
    intake.add_operation("POST", "/one", one)
    long = "x" * KEPT_BODY_JSON
    bodies = [{"b": [1, 2.5], "a": {"z": None, "é": True}}, None, "text", [3, {"x": 1}], long]
    ops = [
        OperationRequest("POST", path, body, f"{path}-{i}", f"op{path}-{i}")
        for path in ("/set", "/one")
        for i, body in enumerate(bodies)
    ]
    assert all(r.status == 201 for r in intake.execute_batch("p", ops))
    assert len(seen) == 2 * len(bodies)
    kept = [(canonical_json(body) if body is not long else None, body) for body in bodies]
    assert seen == kept + kept


def _notes_db(url: str, keyring: Keyring | None) -> Iterator[Database]:
    database = open_server_db(url, durability="normal", keyring=keyring)
    try:
        attach(database)
        yield database
    finally:
        database.close()


@pytest.fixture
def sealed_notes_db(server_db_url: str) -> Iterator[Database]:
    """``notes_db`` sealing the notes' data and the stored answers with a keyring."""
    yield from _notes_db(server_db_url, Keyring((("k1", generate_key()),)))


@pytest.fixture(params=["clear", "sealed"])
def any_notes_db(request: pytest.FixtureRequest, server_db_url: str) -> Iterator[Database]:
    """``notes_db``, then ``sealed_notes_db``."""
    keyring = Keyring((("k1", generate_key()),)) if request.param == "sealed" else None
    yield from _notes_db(server_db_url, keyring)


def test_sealed_at_rest_the_set_path_seals_what_one_by_one_seals(
    sealed_notes_db: Database,
) -> None:
    both = Pair(sealed_notes_db)
    both.batch("p", [create(f"k{i}", f"n{i}", i) for i in range(5)])
    both.batch("p", [create("k1", "n1", 1), create("z", "n2", 7)])
    ops = [write("u0", "n0", 10), write("d1", "n1", None), write("d2", "n2", None, "9")]
    ops += [_op("patch", "p3", "n3", 1, 3), write("d4", "n4", None), create("r1", "n1", 11)]
    assert [r.status for r in both.batch("p", ops)] == [200, 200, 412, 200, 200, 201]
    both.same_state("p")
    with sealed_notes_db.transaction() as tx:
        raw = tx.sql("SELECT response_body, data FROM pigeon_idempotency_claims, ref_notes")
        assert all(not v.startswith("{") for r in raw.fetchall() for v in r.values())


def _broken(kind: str) -> Any:
    def many(tx: Tx, items: Sequence[IntakeContext]) -> Sequence[HandlerResult | None]:
        out = create_notes(tx, items)
        if kind == "raise":
            raise RuntimeError("a set handler blew up after writing")
        if kind == "short":
            return out[:-1]
        return [(404, {"detail": "no"}) for _ in out]

    return many


def test_a_key_claimed_by_another_transaction_after_the_read_is_answered_one_by_one(
    notes_pg: Database, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The batch reads its keys, then another process claims and completes k3 (committed)
    # before the batch stores its claims: the store fails as a duplicate key, the attempt
    # is given up, and the one-by-one way answers k3 from that process's row. Nothing is
    # done twice: k3's note is not written by the batch.
    clock = FakeClock(SERVER_START)
    intake = intake_on(notes_pg, clock)
    ops = [create(f"k{i}", f"n{i}", i) for i in range(6)]
    read = idempotency_sets.SetClaims.read_many
    raced: list[str] = []

    def read_then_race(self: Any, tx: Tx, principal: str, asks: Sequence[Ask]) -> Any:
        found = read(self, tx, principal, asks)
        if not raced:
            raced.append("k3")
            with psycopg.connect(pg_url, autocommit=True) as other:
                other.execute(
                    RACED_CLAIM, {"p": principal, "f": asks[3].fingerprint, "at": clock()}
                )
        return found

    monkeypatch.setattr(idempotency_sets.SetClaims, "read_many", read_then_race)
    results = intake.execute_batch("p", ops)
    assert [(r.status, r.replayed) for r in results] == [(201, False)] * 3 + [(201, True)] + [
        (201, False)
    ] * 2
    assert results[3].body == {"theirs": True}
    with notes_pg.transaction() as tx:
        notes = tx.sql("SELECT id FROM ref_notes WHERE principal = 'p' ORDER BY id").fetchall()
    assert [r["id"] for r in notes] == ["n0", "n1", "n2", "n4", "n5"]


@pytest.mark.parametrize("then_one_by_one", [False, True])
def test_a_key_another_transaction_holds_when_the_claims_are_sent_answers_in_progress(
    notes_pg: Database, pg_url: str, monkeypatch: pytest.MonkeyPatch, then_one_by_one: bool
) -> None:
    # The batch reads its keys, then another transaction claims k3 and stays open: the
    # batch's claims, sent with its COMMIT (or with the statement of an operation after
    # them that runs the one-key way), wait for k3 as long as one claim waits, and the
    # attempt is given up there (nothing of it commits). The one-by-one way then answers
    # the operations before k3, and k3 "in progress": the batch stops at it.
    clock = FakeClock(SERVER_START)
    intake = intake_on(notes_pg, clock)
    ops = [create(f"k{i}", f"n{i}", i) for i in range(6)]
    if then_one_by_one:  # a route without a set handler
        ops.append(OperationRequest("POST", "/refuse", {"id": "r"}, "r", "op-r", clock=stamp(9)))
    read = idempotency_sets.SetClaims.read_many
    other = psycopg.connect(pg_url)  # its transaction open until the batch is answered

    def read_then_hold(self: Any, tx: Tx, principal: str, asks: Sequence[Ask]) -> Any:
        found = read(self, tx, principal, asks)
        if other.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            other.execute(RACED_CLAIM, {"p": principal, "f": asks[3].fingerprint, "at": clock()})
        return found

    monkeypatch.setattr(idempotency_sets.SetClaims, "read_many", read_then_hold)
    try:
        results = intake.execute_batch("p", ops)
    finally:
        other.rollback()
        other.close()
    assert [r.status for r in results] == [201, 201, 201, 409]
    assert "key-in-progress" in results[3].body_text and results[3].transient
    with notes_pg.transaction() as tx:
        notes = tx.sql("SELECT id FROM ref_notes WHERE principal = 'p' ORDER BY id").fetchall()
        keys = tx.sql("SELECT count(*) AS n FROM pigeon_idempotency_claims").fetchone()
    assert [r["id"] for r in notes] == ["n0", "n1", "n2"]
    assert keys == {"n": 3}


def test_a_note_created_by_another_transaction_meanwhile_is_answered_one_by_one(
    notes_pg: Database, pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    # Another process creates note n3 and commits while the batch's INSERT of the notes
    # waits for it: the INSERT fails as a duplicate key, the attempt is given up quietly
    # (a race, not a failure), and the one-by-one way answers k3 with the 409 of a note
    # that exists. The other process's note is kept as it wrote it.
    intake = intake_on(notes_pg, FakeClock(SERVER_START))
    ops = [create(f"k{i}", f"n{i}", i) for i in range(6)]
    read = idempotency_sets.SetClaims.read_many
    other = psycopg.connect(pg_url)
    committed = threading.Timer(0.3, other.commit)

    def read_then_race(self: Any, tx: Tx, principal: str, asks: Sequence[Ask]) -> Any:
        found = read(self, tx, principal, asks)
        if not committed.is_alive() and not committed.finished.is_set():
            other.execute(RACED_NOTE, {"p": principal, "at": SERVER_START})
            committed.start()  # while the batch's INSERT waits on n3's key
        return found

    monkeypatch.setattr(idempotency_sets.SetClaims, "read_many", read_then_race)
    try:
        with caplog.at_level(logging.WARNING, logger="pigeon"):
            results = intake.execute_batch("p", ops)
    finally:
        committed.join()
        other.close()
    assert [r.status for r in results] == [201] * 3 + [409] + [201] * 2
    assert not [r for r in caplog.records if "set-based" in r.getMessage()]
    with notes_pg.transaction() as tx:
        theirs = tx.sql("SELECT data FROM ref_notes WHERE principal = 'p' AND id = 'n3'")
        assert theirs.fetchone() == {"data": '{"theirs":true}'}


RACED_NOTE = """
INSERT INTO ref_notes (principal, id, version, data, deleted, clock, created_at, updated_at)
VALUES (%(p)s, 'n3', 1, '{"theirs":true}', 0, 'c', %(at)s, %(at)s)
"""


RACED_CLAIM = """
INSERT INTO pigeon_idempotency_claims (
    principal, idem_key, fingerprint, method, path, operation_id, state, status,
    response_headers, response_body, body_format, created_at, completed_at,
    response_expires_at, claim_expires_at)
VALUES (%(p)s, 'k3', %(f)s, 'POST', '/notes', 'op-k3', 'completed', 201, '[]',
    '{"theirs":true}', 'json', %(at)s, %(at)s, %(at)s + 86400, %(at)s + 86400 * 30)
"""


@pytest.mark.parametrize("kind", ["raise", "short", "not-2xx"])
def test_a_failing_set_handler_leaves_the_batch_to_the_one_by_one_way(
    notes_db: Database, kind: str
) -> None:
    intake = intake_on(notes_db, FakeClock(SERVER_START), many=_broken(kind))
    results = intake.execute_batch("p", [create(f"k{i}", f"n{i}", i) for i in range(3)])
    assert [r.status for r in results] == [201] * 3
    with notes_db.transaction() as tx:
        assert len(tx.sql("SELECT * FROM ref_effect_ledger").fetchall()) == 3


# -- any batch: the property --------------------------------------------------------------

NOTE_IDS = st.sampled_from(["a", "b", "c"])
KEYS = st.sampled_from([f"k{i}" for i in range(10)])
KINDS = st.sampled_from(["create"] * 6 + ["put", "patch", "delete", "bad", "refuse", "crash"])
STEP = st.tuples(KINDS, KEYS, NOTE_IDS, st.integers(0, 2))
PLAN = st.lists(
    st.tuples(st.lists(STEP, max_size=10), st.sampled_from([0.0, 1.0, DAY + 1])),
    min_size=1,
    max_size=4,
)


def _op(kind: str, key: str, note_id: str, n: int, i: int) -> OperationRequest:
    method, path, body = {
        "create": ("POST", "/notes", {"id": note_id, "v": n}),
        "put": ("PUT", f"/notes/{note_id}", {"v": n}),
        "patch": ("PATCH", f"/notes/{note_id}", {"w": n, "v": None} if n else {"w": {"x": n}}),
        "delete": ("DELETE", f"/notes/{note_id}", None),
        "bad": ("POST", "/notes", {"id": [note_id]}),
        "refuse": ("POST", "/refuse", {"id": f"r{note_id}"}),
        "crash": ("POST", "/crash", {"id": f"c{note_id}"}),
    }[kind]
    return OperationRequest(method, path, body, key, f"op-{key}-{i}", clock=stamp(i))


def test_any_batch_is_answered_and_stored_as_one_by_one(any_notes_db: Database) -> None:
    both = Pair(any_notes_db)

    @settings(max_examples=60, deadline=None)
    @given(plan=PLAN)
    def check(plan: list[tuple[list[tuple[str, str, str, int]], float]]) -> None:
        principal = uuid.uuid4().hex  # each example on its own keys and notes
        for i, (steps, wait) in enumerate(plan):
            both.clock.advance(wait)
            ops = [_op(*step, i * 100 + j) for j, step in enumerate(steps)]
            both.batch(principal, ops)
        both.same_state(principal)

    check()

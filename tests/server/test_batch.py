"""The batch route: one transaction, one savepoint and key per operation, stop at transient."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any
from urllib.parse import quote

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from pigeon.exceptions import ConfigurationError
from pigeon.reference import schema as ref
from pigeon.reference.notes import create_note, delete_note, replace_note
from pigeon.reference.notes_reads import read_ledger
from pigeon.server.app import create_app
from pigeon.server.intake import Intake, OperationRequest
from pigeon.server.options import IntakeOptions
from pigeon.server.results import OpResult
from pigeon.storage.base import Database, Params, Row, Tx
from tests.clocks import FakeClock

from .conftest import CountingDatabase, TestClient, failing_handler


def op(key: str, method: str, path: str, body: Any = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"op-{key}",
        "idempotency_key": key,
        "method": method,
        "path": path,
        "body": body,
        **extra,
    }


def make(
    notes_db: Database, server_clock: FakeClock
) -> tuple[Intake, CountingDatabase, TestClient]:
    counted = CountingDatabase(notes_db)
    intake = Intake(counted, now=server_clock)
    intake.add_operation("POST", "/notes", create_note)
    intake.add_operation("DELETE", "/notes/{id}", delete_note)
    intake.add_operation("POST", "/refuse", failing_handler("4xx"))
    intake.add_operation("POST", "/unavailable", failing_handler("5xx"))
    intake.add_operation("POST", "/crash", failing_handler("raise"))
    client = TestClient(create_app(intake, purge_interval=None), raise_server_exceptions=False)
    return intake, counted, client


def batch(client: TestClient, *ops: dict[str, Any]) -> list[dict[str, Any]]:
    response = client.post("/pigeon/v1/batch", json={"operations": list(ops)})
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def test_permanent_failures_roll_back_their_savepoint_and_the_batch_goes_on_in_one_commit(
    notes_db: Database, server_clock: FakeClock
) -> None:
    _, counted, client = make(notes_db, server_clock)
    results = batch(
        client,
        op("a", "POST", "/notes", {"id": "a"}),
        op("b", "POST", "/refuse", {"id": "b"}),  # writes note b, then 409: rolled back
        op("c", "DELETE", "/notes/zzz"),  # 404, stored
        op("", "POST", "/notes", {"id": "d"}),  # bad key: refused, not stored
        op("e", "GET", "/notes/a"),  # not an operation
        op("f", "POST", "/notes", {"id": "f"}),
    )
    assert [(r["id"], r["status"]) for r in results] == [
        ("op-a", 201),
        ("op-b", 409),
        ("op-c", 404),
        ("op-", 400),
        ("op-e", 405),
        ("op-f", 201),
    ]
    assert counted.commits == 1
    assert [e["entity"] for e in read_ledger(notes_db)] == ["note:a", "note:f"]
    again = batch(client, op("b", "POST", "/refuse", {"id": "b"}), op("c", "DELETE", "/notes/zzz"))
    assert [(r["status"], r["replayed"]) for r in again] == [(409, True), (404, True)]


def test_the_batch_stops_at_the_first_transient_failure(
    notes_db: Database, server_clock: FakeClock
) -> None:
    intake, counted, client = make(notes_db, server_clock)
    for transient in ("/unavailable", "/crash"):
        name = transient[1:]  # a note id has no '/': no path could address it
        results = batch(
            client,
            op(f"1{transient}", "POST", "/notes", {"id": f"1-{name}"}),
            op(f"2{transient}", "POST", transient, {"id": f"x-{name}"}),
            op(f"3{transient}", "POST", "/notes", {"id": f"3-{name}"}),
        )
        assert [r["status"] for r in results] == [201, 503 if transient == "/unavailable" else 500]
    assert counted.commits == 2
    # The ops before the failure committed; the failing one left no claim and no write.
    assert [e["idempotency_key"] for e in read_ledger(notes_db)] == ["1/unavailable", "1/crash"]
    with notes_db.transaction() as tx:
        assert intake.store.get(tx, "anonymous", "2/unavailable") is None
        assert intake.store.get(tx, "anonymous", "3/unavailable") is None


def test_a_not_now_4xx_stops_the_batch_unstored(
    notes_db: Database, server_clock: FakeClock
) -> None:
    intake, _, client = make(notes_db, server_clock)
    intake.add_operation("POST", "/later", lambda ctx: (429, {"detail": "slow down"}))
    results = batch(
        client,
        op("a", "POST", "/notes", {"id": "a"}),
        op("b", "POST", "/later", {}),
        op("c", "POST", "/notes", {"id": "c"}),
    )
    assert [r["status"] for r in results] == [201, 429]  # c would overtake b: not attempted
    with notes_db.transaction() as tx:
        assert intake.store.get(tx, "anonymous", "b") is None  # a retry runs it


def test_a_handlers_sql_error_fails_its_operation_not_the_batch(
    notes_db: Database, server_clock: FakeClock
) -> None:
    # SQLite reports a bad statement as OperationalError, the class it also uses for a busy
    # or broken file. Only the latter is the store being down (503 for everything); a
    # handler's own bad SQL is that operation's 500, and what went before it commits.
    intake, _, client = make(notes_db, server_clock)

    def bad_sql(ctx: Any) -> Any:
        ref.fetchone(ctx.tx, "note_get", {"principal": ctx.principal, "id": "x"})
        if ctx.tx.backend == "sqlite":
            ctx.tx.conn.execute("SELECT no_such_column FROM ref_notes")
        raise RuntimeError("stand-in for the same bug on PostgreSQL")

    intake.add_operation("POST", "/bad-sql", bad_sql)
    results = batch(
        client,
        op("ok", "POST", "/notes", {"id": "ok"}),
        op("bad", "POST", "/bad-sql", {}),
    )
    assert [r["status"] for r in results] == [201, 500]
    _only_ok_committed(notes_db, intake, "bad")


def test_a_statements_own_postgres_operational_error_fails_its_operation_not_the_batch(
    notes_pg: Database, server_clock: FakeClock
) -> None:
    # psycopg raises OperationalError for a whole family of SQLSTATEs, some of which are
    # the statement's own fault: 54000 "program limit exceeded" (here a value too large
    # for a btree index) fails the same way every time it runs. Read as "store down" it
    # answered 503 for the whole batch and for every resend: the batch, good operations
    # included, could never get through.
    intake, _, client = make(notes_pg, server_clock)
    huge = os.urandom(4000).hex()  # random: no compression brings it under the limit

    def oversized(ctx: Any) -> Any:
        ref.execute(
            ctx.tx,
            "note_create",
            {
                "principal": ctx.principal,
                "id": huge,
                "data": "{}",
                "deleted": 0,
                "clock": ctx.clock,
                "now": ctx.now,
            },
        )
        return 201, {}

    intake.add_operation("POST", "/oversized", oversized)
    results = batch(
        client,
        op("ok", "POST", "/notes", {"id": "ok"}),
        op("big", "POST", "/oversized", {}),
    )
    assert [r["status"] for r in results] == [201, 500]
    # The driver's message (it quotes the schema, and may quote data) stays in the log:
    # the answer has an error id, which the log line has too (tests/security).
    body = results[1]["body"]
    assert "index row size" not in str(body) and body["error_id"] in body["detail"]
    alone = intake.execute("anonymous", OperationRequest("POST", "/oversized", {}, "big", "big"))
    assert alone.status == 500 and alone.body["type"].endswith("handler-failed")
    _only_ok_committed(notes_pg, intake, "big")


def _only_ok_committed(notes_db: Database, intake: Intake, failed_key: str) -> None:
    """The batch's good entry ("ok") took effect; the failed one left no effect and no
    stored answer under its key, so a resend runs it again."""
    assert [e["idempotency_key"] for e in read_ledger(notes_db)] == ["ok"]
    with notes_db.transaction() as tx:
        assert intake.store.get(tx, "anonymous", failed_key) is None


def test_an_entity_name_too_long_to_index_is_refused_as_a_bad_entry(
    notes_db: Database, server_clock: FakeClock
) -> None:
    # The entity names the operation in the effect ledger, whose index on it cannot hold a
    # few KB on PostgreSQL: that entry failed there on every resend (SQLite took it).
    _, _, client = make(notes_db, server_clock)
    results = batch(
        client,
        op("long", "POST", "/notes", {"id": "a"}, entity="note:" + "x" * 508),
        op("ok", "POST", "/notes", {"id": "b"}, entity="note:b"),
    )
    assert [r["status"] for r in results] == [400, 201]
    assert "entity" in results[0]["body"]["detail"]
    assert [e["entity"] for e in read_ledger(notes_db)] == ["note:b"]


def test_an_operation_is_the_same_request_alone_or_in_a_batch(
    notes_db: Database, server_clock: FakeClock
) -> None:
    _, _, client = make(notes_db, server_clock)
    alone = client.post("/notes", json={"id": "n", "t": 1}, headers={"Idempotency-Key": "k"})
    results = batch(
        client,
        op("k", "POST", "/notes", {"t": 1, "id": "n"}),
        op("k", "POST", "/notes", {"t": 2, "id": "n"}),  # same key, other body: 422
        op("k2", "POST", "/notes", {"id": "m"}),
        op("k2", "POST", "/notes", {"id": "m"}),  # repeated inside one batch: replayed
    )
    assert results[0]["body"] == alone.json() and results[0]["replayed"] is True
    assert results[0]["headers"]["idempotent-replayed"] == "true"
    assert [r["status"] for r in results] == [201, 422, 201, 201]
    assert [r["replayed"] for r in results] == [True, False, False, True]
    assert len(read_ledger(notes_db)) == 2


def test_a_batch_path_is_read_as_the_single_route_reads_it(
    notes_db: Database, server_clock: FakeClock
) -> None:
    intake = Intake(notes_db, now=server_clock)
    intake.add_operation("POST", "/notes", create_note)
    intake.add_operation("PUT", "/notes/{id}", replace_note)
    client = TestClient(create_app(intake, purge_interval=None))
    client.post("/notes", json={"id": "a b"}, headers={"Idempotency-Key": "c"})
    alone = client.put("/notes/a%20b", json={"v": 1}, headers={"Idempotency-Key": "u1"})
    assert alone.status_code == 200 and alone.json()["id"] == "a b"
    results = batch(
        client,
        op("u1", "PUT", "/notes/a%20b", {"v": 1}),  # the same request again: a replay
        op("u2", "PUT", "/notes/a%20b?src=x", {"v": 2}),  # the query is not the path
    )
    assert [(r["status"], r["replayed"]) for r in results] == [(200, True), (200, False)]
    assert results[1]["body"]["id"] == "a b" and results[1]["body"]["data"] == {"v": 2}


@pytest.mark.parametrize("note", ["a?b", "a#b", "a\\b"])
def test_an_id_with_a_reserved_character_is_the_same_note_alone_or_in_a_batch(
    notes_db: Database, server_clock: FakeClock, note: str
) -> None:
    # The single route read its path from request.url, where Starlette escapes ?, # and \
    # again (a%3Fb): PUT /notes/a%3Fb alone looked for the note 'a%3Fb' (404), in a
    # batch it wrote 'a?b'. One operation, two entities, two fingerprints.
    intake = Intake(notes_db, now=server_clock)
    intake.add_operation("POST", "/notes", create_note)
    intake.add_operation("PUT", "/notes/{id}", replace_note)
    client = TestClient(create_app(intake, purge_interval=None))
    assert client.post("/notes", json={"id": note}, headers={"Idempotency-Key": "c"}).is_success
    path = "/notes/" + quote(note, safe="")
    alone = client.put(path, json={"v": 1}, headers={"Idempotency-Key": "u1"})
    assert alone.status_code == 200, alone.text
    assert alone.json()["id"] == note
    [again] = batch(client, op("u1", "PUT", path, {"v": 1}))
    assert (again["status"], again["replayed"]) == (200, True)


def test_an_intake_mounted_under_a_prefix_serves_its_operations(
    notes_db: Database, server_clock: FakeClock
) -> None:
    # Mounted, the app's paths carry the mount's prefix (root_path) as well: the intake
    # matched them against its templates with it and answered 404 for every write.
    intake = Intake(notes_db, now=server_clock)
    intake.add_operation("POST", "/notes", create_note)
    intake.add_operation("PUT", "/notes/{id}", replace_note)
    outer = Starlette(routes=[Mount("/api", app=create_app(intake, purge_interval=None))])
    client = TestClient(outer)
    created = client.post("/api/notes", json={"id": "1"}, headers={"Idempotency-Key": "c"})
    assert created.status_code == 201, created.text
    put = client.put("/api/notes/1", json={"v": 1}, headers={"Idempotency-Key": "u"})
    assert put.status_code == 200 and put.json()["data"] == {"v": 1}
    [again] = batch_at(client, "/api/pigeon/v1/batch", op("u", "PUT", "/notes/1", {"v": 1}))
    assert (again["status"], again["replayed"]) == (200, True)


def batch_at(client: TestClient, url: str, *ops: dict[str, Any]) -> list[dict[str, Any]]:
    response = client.post(url, json={"operations": list(ops)})
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def test_a_key_in_progress_stops_the_batch(notes_db: Database, server_clock: FakeClock) -> None:
    intake, _, client = make(notes_db, server_clock)
    from pigeon.server.fingerprint import fingerprint

    with notes_db.transaction() as tx:  # another process holds "busy" (separate claim, committed)
        intake.store.claim(
            tx,
            principal="anonymous",
            key="busy",
            fingerprint=fingerprint("POST", "/notes", {"id": "b"}),
            method="POST",
            path="/notes",
            operation_id="x",
        )
    results = batch(
        client,
        op("busy", "POST", "/notes", {"id": "b"}),
        op("after", "POST", "/notes", {"id": "c"}),
    )
    assert [r["status"] for r in results] == [409]
    assert int(results[0]["headers"]["retry-after"]) > 0
    assert read_ledger(notes_db) == []


def test_malformed_batches_are_refused(notes_db: Database, server_clock: FakeClock) -> None:
    _, _, client = make(notes_db, server_clock)
    as_json = {"Content-Type": "application/json"}
    assert client.post("/pigeon/v1/batch", content=b"not json", headers=as_json).status_code == 400
    assert client.post("/pigeon/v1/batch", content=b"not json").status_code == 415  # no type
    assert client.post("/pigeon/v1/batch", json={"ops": []}).status_code == 400
    assert (
        client.post("/pigeon/v1/batch", json={"operations": ["x"]}).json()["results"][0]["status"]
        == 400
    )
    bad_clock = op("k", "POST", "/notes", {"id": "1"}, clock="yesterday")
    assert batch(client, bad_clock)[0]["status"] == 400
    assert read_ledger(notes_db) == []


class _CountingTx:
    def __init__(self, inner: Tx, owner: SavepointCounter) -> None:
        self.inner, self.owner, self.backend = inner, owner, inner.backend
        self.cipher = inner.cipher

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.inner.execute(name, params)

    def fetchone(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        return self.inner.fetchone(name, params)

    def fetchall(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return self.inner.fetchall(name, params)

    def executemany(self, name: str, params: Sequence[Params]) -> int:
        return self.inner.executemany(name, params)

    def sql(self, statement: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.inner.sql(statement, params)  # the reference app's queries go this way

    def savepoint(self) -> AbstractContextManager[None]:
        self.owner.savepoints += 1
        return self.inner.savepoint()


class SavepointCounter:
    """The real database, counting commits and savepoints (subtransactions on PostgreSQL)."""

    def __init__(self, inner: Database) -> None:
        self.inner, self.backend, self.cipher = inner, inner.backend, inner.cipher
        self.commits = self.savepoints = 0

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self.inner.transaction() as tx:
            yield _CountingTx(tx, self)
        self.commits += 1

    def reading(self) -> contextlib.AbstractContextManager[Tx]:
        return self.inner.reading()  # nothing to commit

    def close(self) -> None:
        self.inner.close()


def _notes(n: int, prefix: str = "n") -> list[OperationRequest | OpResult]:
    return [
        OperationRequest("POST", "/notes", {"id": f"{prefix}{i}"}, f"{prefix}{i}", f"{prefix}{i}")
        for i in range(n)
    ]


def test_each_operation_costs_one_savepoint_and_pg_batches_commit_every_64(
    notes_db: Database, server_clock: FakeClock
) -> None:
    counted = SavepointCounter(notes_db)
    intake = Intake(counted, now=server_clock)
    intake.add_operation("POST", "/notes", create_note)
    intake.add_operation("POST", "/refuse", failing_handler("4xx"))
    ops = _notes(100)
    ops[50] = OperationRequest("POST", "/refuse", {"id": "r"}, "r", "r")  # a stored 409
    results = intake.execute_batch("p", ops)
    assert [r.status for r in results] == [201] * 50 + [409] + [201] * 49
    assert counted.savepoints == 100  # one per operation, never two
    assert counted.commits == 1  # the whole batch is one commit unless batch_chunk is set
    assert len(read_ledger(notes_db)) == 99
    replays = intake.execute_batch("p", ops)  # replays run no handler: no savepoint at all
    assert counted.savepoints == 100
    assert [r.status for r in replays] == [r.status for r in results]
    assert all(r.replayed for r in replays)


def test_a_chunked_batch_commits_each_chunk_and_stops_at_the_first_transient(
    notes_db: Database, server_clock: FakeClock
) -> None:
    counted = SavepointCounter(notes_db)
    intake = Intake(counted, IntakeOptions(batch_chunk=2), now=server_clock)
    intake.add_operation("POST", "/notes", create_note)
    intake.add_operation("POST", "/unavailable", failing_handler("5xx"))
    ops = _notes(4)
    ops += [OperationRequest("POST", "/unavailable", {"id": "x"}, "x", "x"), *_notes(2, "late")]
    results = intake.execute_batch("p", ops)
    assert [r.status for r in results] == [201, 201, 201, 201, 503]
    assert counted.commits == 3  # [n0 n1] [n2 n3] [x: nothing kept], then it stopped
    assert [e["idempotency_key"] for e in read_ledger(notes_db)] == ["n0", "n1", "n2", "n3"]
    with notes_db.transaction() as tx:
        assert intake.store.get(tx, "p", "x") is None  # released: a retry runs
        assert intake.store.get(tx, "p", "late0") is None


@pytest.mark.parametrize("chunk", [0, -3])
def test_batch_chunk_must_be_positive(notes_db: Database, chunk: int) -> None:
    with pytest.raises(ConfigurationError, match="batch_chunk"):
        IntakeOptions(batch_chunk=chunk)

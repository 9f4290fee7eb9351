"""The reference notes application: versions, If-Match, merge patch, tombstones, ledger."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.responses import JSONResponse

from pigeon.core.wire import PROBLEM_JSON
from pigeon.exceptions import AuthorizationRequired
from pigeon.reference import notes_reads
from pigeon.reference.notes import create_notes_app, merge_patch
from pigeon.reference.notes_reads import read_ledger
from pigeon.server.auth import BearerAuth
from pigeon.storage.base import Database

from .conftest import OPERATOR, NotesClient, TestClient, operator_token

_counter = iter(range(10**9))


def send(client: TestClient, method: str, path: str, body: Any = None, **headers: str) -> Any:
    headers = {"Idempotency-Key": f"k{next(_counter)}"} | headers
    return client.request(method, path, json=body, headers=headers)


@pytest.fixture
def client(notes_client: NotesClient) -> TestClient:
    return notes_client(operator=operator_token())


def test_versions_etags_and_if_match(client: TestClient, notes_db: Database) -> None:
    created = send(client, "POST", "/notes", {"id": "1", "title": "a", "tags": ["x"]})
    assert created.status_code == 201 and created.headers["etag"] == '"1"'
    stale = send(client, "PUT", "/notes/1", {"title": "b"}, **{"If-Match": '"7"'})
    assert stale.status_code == 412 and stale.json()["version"] == 1
    assert stale.json()["data"] == {"title": "a", "tags": ["x"]}
    put = send(client, "PUT", "/notes/1", {"title": "b"}, **{"If-Match": '"1"'})
    assert put.headers["etag"] == '"2"' and put.json()["data"] == {"title": "b"}
    patched = send(client, "PATCH", "/notes/1", {"title": None, "body": "c"})
    assert patched.json()["data"] == {"body": "c"} and patched.json()["version"] == 3
    got = client.get("/notes/1")
    assert got.headers["etag"] == '"3"' and got.json()["data"] == {"body": "c"}
    assert got.json() == patched.json()  # the answer is the note as stored, to its clock
    exists = send(client, "POST", "/notes", {"id": "1"})
    assert exists.status_code == 409 and exists.json()["current"]["version"] == 3
    assert send(client, "PUT", "/notes/1", {"id": "2"}).status_code == 400
    kept = send(client, "DELETE", "/notes/1", **{"If-Match": '"2"'})
    assert kept.status_code == 412 and kept.headers["etag"] == '"3"'
    assert kept.json()["data"] == {"body": "c"}
    anyway = send(client, "PUT", "/notes/1", {"t": 1}, **{"If-Match": "*"})
    assert anyway.json()["version"] == 4
    # The refused writes (412, 409, 400) left no effect.
    assert [(e["method"], e["version"]) for e in read_ledger(notes_db)] == [
        ("POST", 1),
        ("PUT", 2),
        ("PATCH", 3),
        ("PUT", 4),
    ]


def test_delete_leaves_a_tombstone_and_a_recreate_continues_the_versions(
    client: TestClient, notes_db: Database
) -> None:
    send(
        client,
        "POST",
        "/notes",
        {"id": "1"},
        **{"X-Pigeon-Clock": "000000000000005-0000000000-dev"},
    )
    assert send(client, "DELETE", "/notes/1").json() == {"id": "1", "deleted": True, "version": 2}
    assert client.get("/notes/1").status_code == 404
    assert send(client, "DELETE", "/notes/1").status_code == 404
    assert send(client, "PATCH", "/notes/1", {"a": 1}).status_code == 404
    assert send(client, "PUT", "/notes/1", {"a": 1}, **{"If-Match": "*"}).status_code == 404
    assert send(client, "POST", "/notes", {"id": "1"}).json()["version"] == 3
    ledger = read_ledger(notes_db)
    assert [(e["method"], e["version"]) for e in ledger] == [
        ("POST", 1),
        ("DELETE", 2),
        ("POST", 3),
    ]
    assert ledger[0]["clock"] == "000000000000005-0000000000-dev"  # the operation's own clock
    assert ledger[1]["clock"] > ledger[0]["clock"]  # the server clock never falls behind it
    read = client.get("/pigeon/v1/ledger", params={"after": 1}, headers=OPERATOR)
    assert read.json()["entries"] == ledger[1:]


def test_server_generated_ids_and_listing(client: TestClient) -> None:
    ids = {send(client, "POST", "/notes", {"n": i}).json()["id"] for i in range(3)}
    assert len(ids) == 3
    assert {n["id"] for n in client.get("/notes").json()["notes"]} == ids
    assert client.get("/pigeon/v1/health").json() == {"status": "ok"}


json_objects = st.dictionaries(
    st.sampled_from("abc"),
    st.none() | st.integers() | st.dictionaries(st.sampled_from("xy"), st.none() | st.integers()),
)


@given(json_objects, json_objects)
def test_merge_patch_sets_what_the_patch_sets_and_removes_nulls(target: Any, patch: Any) -> None:
    merged = merge_patch(target, patch)
    for name, value in patch.items():
        if value is None:
            assert name not in merged
        elif not isinstance(value, dict):
            assert merged[name] == value
    for name in target.keys() - patch.keys():
        assert merged[name] == target[name]
    assert merge_patch(merged, patch) == merged  # idempotent


def test_the_read_routes_refuse_with_problems_naming_what_was_wrong(notes_db: Database) -> None:
    """The notes' read routes answered a missing token with a bare {"detail"} as
    application/json (always 401, even for an authenticator's 403) and a query
    parameter that is not a number with a 500 in plain text."""

    def forbid_bob(conn: Any) -> str:
        if conn.headers.get("authorization") == "Bearer bob.1":
            raise AuthorizationRequired("bob may not read here", status=403)
        return BearerAuth(required=True)(conn)

    app = create_notes_app(
        notes_db,
        purge_interval=None,
        lww_collections=["l"],
        authenticate=forbid_bob,
        operator=operator_token(),
    )
    alice = {"Authorization": "Bearer alice.1"}
    with TestClient(app, raise_server_exceptions=False) as client:
        for path in ("/notes", "/notes/1", "/l/1", "/pigeon/v1/outcomes"):
            anonymous = client.get(path)
            assert anonymous.status_code == 401, path
            assert anonymous.headers["content-type"] == PROBLEM_JSON
            assert "Authorization" in anonymous.json()["detail"]
            assert client.get(path, headers={"Authorization": "Bearer bob.1"}).status_code == 403
        for path, who in (
            ("/pigeon/v1/ledger?after=x", OPERATOR),
            ("/pigeon/v1/outcomes?after=1.5", alice),
        ):
            bad = client.get(path, headers=who)
            assert bad.status_code == 400, path
            assert bad.headers["content-type"] == PROBLEM_JSON
            assert "'after'" in bad.json()["detail"]


def test_an_id_too_long_to_index_is_refused_400_on_every_backend(notes_db: Database) -> None:
    """A note (or resource) id is part of its table's primary key. A few KB of it cannot
    be indexed by PostgreSQL: the write failed there with a 500 on every resend, until the
    client gave up, while SQLite stored it. Now a stored 400, the same everywhere."""
    app = create_notes_app(
        notes_db, purge_interval=None, lww_collections=["lww"], crdt_collections=["docs"]
    )
    huge = "i" * 256
    update = "AQHVptONiNioAQAEAQF0AmQxAA=="  # any base64: the id is refused first
    with TestClient(app) as client:
        for method, path, body in (
            ("POST", "/notes", {"id": huge}),
            ("POST", "/lww", {"id": huge, "t": 1}),
            ("PUT", f"/lww/{huge}", {"t": 1}),
            ("POST", "/docs", {"id": huge, "update": update}),
            ("PATCH", f"/docs/{huge}", {"update": update}),
        ):
            reply = send(client, method, path, body)
            assert reply.status_code == 400, (method, path[:20], reply.text[:200])
            assert "256 characters" in reply.json()["detail"]
        assert send(client, "POST", "/notes", {"id": "i" * 255}).status_code == 201


@pytest.mark.parametrize("path", ["/notes", "/pigeon/v1/ledger", "/pigeon/v1/outcomes"])
def test_a_list_route_encodes_its_page_off_the_event_loop(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A page of the ledger is up to 100,000 rows, tens of megabytes of JSON, and a
    caller's notes have no bound: encoded on the event loop, a page held up every other
    request of the process."""
    looped: list[bool] = []

    class Recorded(JSONResponse):
        def render(self, content: Any) -> bytes:
            try:
                asyncio.get_running_loop()
                looped.append(True)
            except RuntimeError:
                looped.append(False)
            return super().render(content)

    monkeypatch.setattr(notes_reads, "JSONResponse", Recorded)
    assert send(client, "POST", "/notes", {"id": "1"}).status_code == 201
    who = OPERATOR if path.endswith("ledger") else {"Authorization": "Bearer ada.1"}
    reply = client.get(path, headers=who)
    assert reply.status_code == 200, reply.text
    assert looped == [False]


READS = ["/notes", "/notes/1", "/pigeon/v1/ledger", "/pigeon/v1/outcomes", "/pigeon/v1/records/r"]


@pytest.mark.parametrize("path", READS)
def test_a_read_route_answers_while_a_writer_holds_the_database(
    client: TestClient, notes_db: Database, path: str
) -> None:
    """The notes app's reads took SQLite's one write lock (BEGIN IMMEDIATE): a page of
    100,000 ledger rows held it 0.4 s, every write of the server waiting behind it, and
    each read waited for the writer's batches. They read beside the writer now
    (``Database.reading``)."""
    assert send(client, "POST", "/notes", {"id": "1"}).status_code == 201
    entered, released = threading.Event(), threading.Event()

    def writer() -> None:
        with notes_db.transaction():  # on SQLite, BEGIN IMMEDIATE: the write lock
            entered.set()
            released.wait(30)

    who = {**OPERATOR} if "ledger" in path or "records" in path else {}
    with ThreadPoolExecutor(2) as pool:
        holding = pool.submit(writer)
        assert entered.wait(10)
        reading = pool.submit(client.get, path, headers=who)
        try:
            answer = reading.result(timeout=5)  # behind the writer: never, until released
        finally:
            released.set()
        holding.result()
    assert answer.status_code in (200, 404), answer.text

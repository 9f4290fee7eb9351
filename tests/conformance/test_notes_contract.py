"""The notes contract, over HTTP, as every server that claims it must answer: versions as
ETags, If-Match, merge patch, tombstones, the Idempotency-Key's rules, batches."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest


@pytest.fixture
def notes_http(notes_server: str) -> Iterator[httpx.Client]:
    """An HTTP client of the notes server under test, whichever framework serves it."""
    with httpx.Client(base_url=notes_server, timeout=30) as http:
        yield http


def send(notes_http: httpx.Client, method: str, path: str, body: Any = None, **headers: str) -> Any:
    headers = {"Idempotency-Key": uuid.uuid4().hex} | headers
    return notes_http.request(method, path, json=body, headers=headers)


def test_a_create_is_version_1_with_its_etag_and_location(notes_http: httpx.Client) -> None:
    made = send(notes_http, "POST", "/notes", {"id": "n1", "title": "a"})
    assert made.status_code == 201 and made.headers["etag"] == '"1"'
    assert made.headers["location"] == "/notes/n1"
    assert made.json()["data"] == {"title": "a"} and made.json()["version"] == 1
    got = notes_http.get("/notes/n1")
    assert got.status_code == 200 and got.json()["data"] == {"title": "a"}


def test_if_match_guards_the_version(notes_http: httpx.Client) -> None:
    send(notes_http, "POST", "/notes", {"id": "n1", "title": "a"})
    stale = send(notes_http, "PUT", "/notes/n1", {"title": "b"}, **{"If-Match": '"7"'})
    assert stale.status_code == 412 and stale.json()["version"] == 1
    assert stale.json()["data"] == {"title": "a"}
    put = send(notes_http, "PUT", "/notes/n1", {"title": "b"}, **{"If-Match": '"1"'})
    assert put.status_code == 200 and put.headers["etag"] == '"2"'
    assert put.json()["data"] == {"title": "b"}


def test_a_patch_merges_and_null_removes(notes_http: httpx.Client) -> None:
    send(notes_http, "POST", "/notes", {"id": "n1", "title": "a", "tags": ["x"]})
    patched = send(notes_http, "PATCH", "/notes/n1", {"title": None, "body": "c"})
    assert patched.status_code == 200 and patched.json()["version"] == 2
    assert patched.json()["data"] == {"tags": ["x"], "body": "c"}
    assert notes_http.get("/notes/n1").headers["etag"] == '"2"'


def test_a_second_create_of_one_id_is_409_with_the_current_note(notes_http: httpx.Client) -> None:
    send(notes_http, "POST", "/notes", {"id": "n1"})
    again = send(notes_http, "POST", "/notes", {"id": "n1"})
    assert again.status_code == 409 and again.json()["current"]["version"] == 1


def test_a_delete_leaves_a_tombstone_and_a_recreate_continues(notes_http: httpx.Client) -> None:
    send(notes_http, "POST", "/notes", {"id": "n1"})
    deleted = send(notes_http, "DELETE", "/notes/n1")
    assert deleted.json() == {"id": "n1", "deleted": True, "version": 2}
    assert notes_http.get("/notes/n1").status_code == 404
    assert send(notes_http, "DELETE", "/notes/n1").status_code == 404
    assert send(notes_http, "PATCH", "/notes/n1", {"a": 1}).status_code == 404
    assert send(notes_http, "POST", "/notes", {"id": "n1"}).json()["version"] == 3


def test_the_list_holds_the_callers_live_notes(notes_http: httpx.Client) -> None:
    ids = {send(notes_http, "POST", "/notes", {"n": i}).json()["id"] for i in range(3)}
    assert len(ids) == 3  # ids made by the server
    send(notes_http, "DELETE", f"/notes/{sorted(ids)[0]}")
    listed = {note["id"] for note in notes_http.get("/notes").json()["notes"]}
    assert listed == set(sorted(ids)[1:])


def test_a_body_naming_another_id_is_400_and_frees_the_key(notes_http: httpx.Client) -> None:
    send(notes_http, "POST", "/notes", {"id": "n1"})
    key = {"Idempotency-Key": "k-put"}
    assert send(notes_http, "PUT", "/notes/n1", {"id": "n2"}, **key).status_code == 400
    assert send(notes_http, "PUT", "/notes/n1", {"id": "n1", "t": 1}, **key).status_code == 200


def test_the_key_replays_refuses_another_request_and_is_required(notes_http: httpx.Client) -> None:
    key = {"Idempotency-Key": "k1"}
    first = send(notes_http, "POST", "/notes", {"id": "n1", "t": 1}, **key)
    again = send(notes_http, "POST", "/notes", {"id": "n1", "t": 1}, **key)
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    other = send(notes_http, "POST", "/notes", {"id": "n1", "t": 2}, **key)
    assert other.status_code == 422
    assert other.headers["content-type"] == "application/problem+json"
    keyless = notes_http.post("/notes", json={"id": "n9"})
    assert keyless.status_code == 400 and notes_http.get("/notes/n9").status_code == 404


def test_a_batch_applies_in_order_and_replays_when_resent(notes_http: httpx.Client) -> None:
    ops = [
        {
            "id": "op1",
            "idempotency_key": "b1",
            "method": "POST",
            "path": "/notes",
            "body": {"id": "b"},
        },
        {
            "id": "op2",
            "idempotency_key": "b2",
            "method": "PATCH",
            "path": "/notes/b",
            "body": {"x": 1},
        },
        {
            "id": "op3",
            "idempotency_key": "b3",
            "method": "DELETE",
            "path": "/notes/b",
            "body": None,
        },
    ]
    first = notes_http.post("/pigeon/v1/batch", json={"operations": ops}).json()["results"]
    assert [(r["id"], r["status"], r["replayed"]) for r in first] == [
        ("op1", 201, False),
        ("op2", 200, False),
        ("op3", 200, False),
    ]
    assert first[1]["body"]["data"] == {"x": 1}
    again = notes_http.post("/pigeon/v1/batch", json={"operations": ops}).json()["results"]
    assert [(r["status"], r["replayed"]) for r in again] == [(201, True), (200, True), (200, True)]
    assert notes_http.get("/notes/b").status_code == 404


TOO_MANY = '{"operations": [' + ",".join(["{}"] * 1001) + "]}"


@pytest.mark.parametrize(
    ("content", "media", "status", "problem"),
    [
        ('{"operations": [{"a": 1, "a": 2}]}', "application/json", 400, "bad-json"),
        ('{"operations": [', "application/json", 400, "bad-json"),
        (TOO_MANY, "application/json", 400, "batch-too-large"),
        ('{"ops": []}', "application/json", 400, "bad-batch"),
        ('{"operations": []}', "text/plain", 415, "unsupported-media-type"),
    ],
)
def test_a_body_that_is_no_batch_is_refused_alike_by_every_server(
    notes_http: httpx.Client, content: str, media: str, status: int, problem: str
) -> None:
    """The FastAPI route answered "bad-batch" to a body that was no JSON or held more
    than 1,000 operations, and took any media type: every server reads a batch with
    `pigeon.server.batch_wire.read_batch` now."""
    reply = notes_http.post("/pigeon/v1/batch", content=content, headers={"Content-Type": media})
    assert reply.status_code == status, reply.text
    assert reply.json()["type"].endswith(problem), reply.json()

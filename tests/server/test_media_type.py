"""A write's body is JSON, and says so (issue 21, item 6): every write route the app
serves (the intake's operations and the batch, enumerated from the app) answers 415 for a
body declared as anything but ``application/json`` or a ``+json`` type (a charset only if
UTF-8), or sent with no Content-Type at all; nothing is claimed or stored. Before, any
Content-Type was read as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette

from pigeon.core.wire import BATCH_PATH, PROBLEM_PREFIX
from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.server.messages import is_json_media
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db

from .conftest import TestClient

USER = {"Authorization": "Bearer ada.1"}
REFUSED = (
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/xml",
    "application/jsonp",
    "json",
    "application/json; charset=iso-8859-1",
    None,  # a body without a type
)
ACCEPTED = (
    "application/json",
    "Application/JSON",
    "application/json; charset=UTF-8",
    'application/json;charset="utf-8"',
    "application/merge-patch+json",
)


@pytest.fixture
def served(server_db_url: str) -> Iterator[tuple[Starlette, Database]]:
    notes_db = open_server_db(server_db_url)
    try:
        yield (
            create_notes_app(notes_db, purge_interval=None, lww_collections=("lww-notes",)),
            notes_db,
        )
    finally:
        notes_db.close()


def write_routes(app: Starlette) -> list[tuple[str, str]]:
    """(method, path) of every write the app serves: its intake's operations, the batch."""
    routes = [(r.method, r.template.replace("{id}", "x")) for r in app.state.intake.routes]
    return [*routes, ("POST", BATCH_PATH)]


def body_for(path: str) -> bytes:
    if path == BATCH_PATH:
        entry = {"idempotency_key": "b", "method": "POST", "path": "/notes", "body": {"id": "b"}}
        return json.dumps({"operations": [entry]}).encode()
    return json.dumps({"id": "x", "title": "t"}).encode()


def test_every_write_route_refuses_a_body_not_declared_json(
    served: tuple[Starlette, Database],
) -> None:
    app, notes_db = served
    routes = write_routes(app)
    assert len(routes) >= 6
    with TestClient(app) as client:
        for method, path in routes:
            for n, media in enumerate(REFUSED):
                headers = USER | {"Idempotency-Key": f"{method}{path}{n}"}
                if media is not None:
                    headers["Content-Type"] = media
                reply = client.request(method, path, content=body_for(path), headers=headers)
                assert reply.status_code == 415, (method, path, media, reply.text)
                assert reply.json()["type"] == PROBLEM_PREFIX + "unsupported-media-type"
    assert read_ledger(notes_db) == []


def test_json_and_json_based_types_are_accepted(served: tuple[Starlette, Database]) -> None:
    app, _ = served
    with TestClient(app) as client:
        for method, path in write_routes(app):
            for n, media in enumerate(ACCEPTED):
                headers = USER | {"Idempotency-Key": f"ok{method}{path}{n}", "Content-Type": media}
                reply = client.request(method, path, content=body_for(path), headers=headers)
                assert reply.status_code != 415 and reply.status_code < 500, (method, path, media)
        # No body, no type: a DELETE as every client sends it.
        gone = client.delete("/notes/x", headers=USER | {"Idempotency-Key": "del"})
        assert gone.status_code != 415


def test_the_rule_itself() -> None:
    assert all(is_json_media(m) for m in ACCEPTED)
    assert not any(is_json_media(m) for m in REFUSED if m is not None)

"""Validation before the claim: a request invalid for its route stores nothing under its
key, so the corrected request (the edge queue never changes a key) runs under it."""

from __future__ import annotations

from typing import Any

import pytest

from pigeon.exceptions import ConfigurationError, ValidationError
from pigeon.reference.notes import create_note, create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.server.app import create_app
from pigeon.server.intake import ClaimMode, Intake, IntakeContext, OperationRequest
from pigeon.server.openapi import build_openapi
from pigeon.server.options import IntakeOptions, ServerOptions
from pigeon.server.validation import RequestCheck
from pigeon.storage.base import Database

from .conftest import TestClient

KEY = {"Idempotency-Key": "k"}


def in_mode(claim_mode: ClaimMode) -> ServerOptions:
    return ServerOptions(intake=IntakeOptions(claim_mode=claim_mode))


@pytest.mark.parametrize("claim_mode", ["inline", "separate"])
def test_an_invalid_body_is_not_stored_and_the_corrected_request_runs_once(
    notes_db: Database, claim_mode: ClaimMode
) -> None:
    client = TestClient(create_notes_app(notes_db, in_mode(claim_mode), purge_interval=None))
    bad = client.post("/notes", json=["title", "x"], headers=KEY)
    assert bad.status_code == 400, bad.text
    assert bad.headers["content-type"] == "application/problem+json"
    assert "idempotent-replayed" not in bad.headers
    again = client.post("/notes", json=["title", "x"], headers=KEY)
    assert again.status_code == 400 and "idempotent-replayed" not in again.headers
    fixed = client.post("/notes", json={"id": "n1", "title": "x"}, headers=KEY)
    assert fixed.status_code == 201, fixed.text
    replay = client.post("/notes", json={"id": "n1", "title": "x"}, headers=KEY)
    assert replay.status_code == 201 and replay.headers["idempotent-replayed"] == "true"
    assert len(read_ledger(notes_db)) == 1


@pytest.mark.parametrize(
    ("path", "method", "body", "says"),
    [
        ("/notes", "POST", {"id": {"a": 1}}, "body.id"),
        ("/notes/n1", "PUT", {"id": "n2"}, "path names"),
        ("/notes/n1", "PATCH", 7, "JSON object"),
        ("/lww-notes", "POST", {"text": "no id"}, "'id'"),
        ("/docs/d", "PATCH", {"update": "%%%"}, "base64"),
        ("/answers", "POST", {"question": " ", "answer": "4"}, "'question'"),
    ],
)
def test_every_reference_route_refuses_before_the_claim(
    notes_db: Database, path: str, method: str, body: Any, says: str
) -> None:
    app = create_notes_app(
        notes_db, purge_interval=None, lww_collections=("lww-notes",), crdt_collections=("docs",)
    )
    client = TestClient(app)
    reply = client.request(method, path, json=body, headers=KEY)
    assert reply.status_code in (400, 422), reply.text
    assert says in reply.json()["detail"]
    intake: Intake = app.state.intake
    with notes_db.transaction() as tx:
        assert intake.store.get(tx, "anonymous", "k") is None  # nothing claimed or stored


def test_a_batch_reports_an_invalid_entry_in_place_and_goes_on(notes_db: Database) -> None:
    client = TestClient(create_notes_app(notes_db, purge_interval=None))

    def entry(key: str, body: Any) -> dict[str, Any]:
        return {"idempotency_key": key, "method": "POST", "path": "/notes", "body": body}

    first = client.post(
        "/pigeon/v1/batch", json={"operations": [entry("a", [1]), entry("b", {"id": "b"})]}
    )
    assert [r["status"] for r in first.json()["results"]] == [400, 201]
    second = client.post("/pigeon/v1/batch", json={"operations": [entry("a", {"id": "a"})]})
    assert [r["status"] for r in second.json()["results"]] == [201]
    assert sorted(row["idempotency_key"] for row in read_ledger(notes_db)) == ["a", "b"]


def test_a_validation_error_raised_by_the_handler_rolls_back_and_frees_the_key(
    notes_db: Database,
) -> None:
    def late_check(ctx: IntakeContext) -> Any:
        result = create_note(ctx)  # written...
        if ctx.body.get("bad"):
            raise ValidationError("refused after the write", slug="late")  # ...and undone
        return result

    intake = Intake(notes_db)
    intake.add_operation("POST", "/notes", late_check)
    request = OperationRequest("POST", "/notes", {"id": "n", "bad": True}, "k", "op")
    refused = intake.execute("p", request)
    assert (refused.status, refused.transient, refused.committed_key) == (400, False, None)
    assert read_ledger(notes_db) == []
    fixed = intake.execute("p", OperationRequest("POST", "/notes", {"id": "n"}, "k", "op"))
    assert fixed.status == 201
    assert len(read_ledger(notes_db)) == 1


def test_the_openapi_document_publishes_the_schema_that_is_enforced(notes_db: Database) -> None:
    schema = {"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}}
    intake = Intake(notes_db)
    intake.add_operation("POST", "/things", create_note, request_schema=schema)
    spec = build_openapi(intake)
    published = spec["paths"]["/things"]["post"]["requestBody"]["content"]["application/json"]
    assert published["schema"] == schema
    client = TestClient(create_app(intake, purge_interval=None))
    reply = client.post("/things", json={"title": 3}, headers=KEY)
    assert reply.status_code == 400
    assert reply.json()["detail"] == "body.title: 3 is not of type 'string'"


def test_a_schema_that_is_not_json_schema_is_refused_at_registration(notes_db: Database) -> None:
    with pytest.raises(ConfigurationError, match="not a valid JSON Schema"):
        Intake(notes_db).add_operation("POST", "/x", create_note, request_schema={"type": 12})


def test_a_validation_error_answers_only_400_or_422() -> None:
    with pytest.raises(ValueError, match="400 or 422"):
        ValidationError("x", status=409)
    check = RequestCheck.of(None, None)
    assert check is None

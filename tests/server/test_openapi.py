"""The published contract: a valid OpenAPI document that states the live policy."""

from __future__ import annotations

from openapi_spec_validator import validate

from pigeon.server.idempotency import IdempotencyPolicy
from pigeon.server.notes import create_notes_app
from pigeon.storage.base import Database

from .conftest import TestClient


def test_the_openapi_document_is_valid_and_states_the_contract(db: Database) -> None:
    policy = IdempotencyPolicy(lock_timeout=45, response_retention=3600, claim_retention=7200)
    with TestClient(create_notes_app(db, policy=policy, purge_interval=None)) as client:
        spec = client.get("/pigeon/v1/openapi.json").json()
    validate(spec)
    contract = spec["x-pigeon-idempotency"]
    assert contract["lock_timeout_seconds"] == 45
    assert contract["response_retention_seconds"] == 3600
    assert contract["claim_retention_seconds"] == 7200
    assert contract["replay_header"] == "Idempotent-Replayed"
    keyed = {
        (path, method)
        for path, ops in spec["paths"].items()
        for method, operation in ops.items()
        if {"$ref": "#/components/parameters/IdempotencyKey"} in operation.get("parameters", [])
    }
    assert keyed == {
        ("/answers", "post"),
        ("/notes", "post"),
        ("/notes/{id}", "put"),
        ("/notes/{id}", "patch"),
        ("/notes/{id}", "delete"),
    }
    key = spec["components"]["parameters"]["IdempotencyKey"]
    assert key["required"] is True and key["schema"]["maxLength"] == 255
    assert "/pigeon/v1/batch" in spec["paths"] and "/notes" in spec["paths"]
    assert "409" in spec["paths"]["/notes"]["post"]["responses"]
    assert "3600 s" in spec["info"]["description"]

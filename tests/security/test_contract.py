"""Issue 21, item 7, from outside: the published contract is the server's.

schemathesis found requests valid by the document that the server refused (a clock
stamp, an empty or reused key, a body id, a CRDT update) and a batch entry with
``if_match: {}`` that the server took as "no If-Match". Each is replayed against the
deployment: the document's verdict (its own JSON Schema, read from the server) and the
server's answer agree.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import jsonschema

from .conftest import Deployed


def _document(deployed: Deployed) -> dict[str, Any]:
    reply = httpx.get(deployed.url + "/pigeon/v1/openapi.json")
    assert reply.status_code == 200
    spec: dict[str, Any] = reply.json()
    return spec


def _valid(spec: dict[str, Any], schema: dict[str, Any], value: object) -> bool:
    # The component schemas are reachable from the document itself.
    return jsonschema.Draft202012Validator({**schema, "components": spec["components"]}).is_valid(
        value
    )


def test_a_header_the_document_refuses_the_server_refuses(deployed: Deployed) -> None:
    spec = _document(deployed)
    parameters = spec["components"]["parameters"]
    cases = [
        ("Clock", "X-Pigeon-Clock", ","),  # the finding: documented as any text, then 400
        ("Clock", "X-Pigeon-Clock", "1-2-node"),
        ("Clock", "X-Pigeon-Clock", "999999999999999-0-n"),  # past the year 9999
        ("IdempotencyKey", "Idempotency-Key", '""'),
        ("IdempotencyKey", "Idempotency-Key", "k" * 256),
        ("IfMatch", "If-Match", "x" * 256),
        ("OperationId", "X-Pigeon-Operation-Id", "op-1"),
    ]
    for name, header, value in cases:
        documented = _valid(spec, parameters[name]["schema"], value)
        headers = {"Idempotency-Key": uuid.uuid4().hex, header: value} | deployed.user("ada")
        reply = httpx.post(deployed.url + "/notes", json={}, headers=headers)
        assert (reply.status_code == 201) is documented, (header, value, reply.text)


def test_a_batch_entry_outside_the_published_entry_is_refused_alone(deployed: Deployed) -> None:
    spec = _document(deployed)
    entry_schema = spec["components"]["schemas"]["BatchOperation"]
    note = uuid.uuid4().hex
    entries = [
        {"idempotency_key": uuid.uuid4().hex, "method": "POST", "path": "/notes", "body": {}},
        {
            "idempotency_key": uuid.uuid4().hex,
            "method": "POST",
            "path": "/notes",
            "body": {"id": note},
            "if_match": {},  # the finding: taken as "no If-Match", and applied
        },
    ]
    assert [_valid(spec, entry_schema, e) for e in entries] == [True, False]
    reply = httpx.post(
        deployed.url + "/pigeon/v1/batch",
        json={"operations": entries},
        headers=deployed.user("ada"),
    )
    assert reply.status_code == 200, reply.text
    statuses = [r["status"] for r in reply.json()["results"]]
    assert statuses == [201, 400], reply.text
    assert reply.json()["results"][1]["body"]["type"].endswith("bad-batch-entry")
    missing = httpx.get(f"{deployed.url}/notes/{note}", headers=deployed.user("ada"))
    assert missing.status_code == 404  # nothing of the refused entry was applied


def test_a_body_id_the_document_allows_is_taken(deployed: Deployed) -> None:
    # The finding: {"id": 1312947717.0} is an integer to JSON Schema, and was a 400.
    key = {"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"}
    reply = httpx.post(
        deployed.url + "/notes",
        content=b'{"id": 1312947717.0}',
        headers=key | deployed.user("ada"),
    )
    assert reply.status_code == 201, reply.text
    assert reply.json()["id"] == "1312947717"

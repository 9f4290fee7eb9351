"""The published contract: a valid OpenAPI document that states the live policy."""

from __future__ import annotations

from typing import Any

from openapi_spec_validator import validate

from pigeon.reference.notes import create_notes_app
from pigeon.server.app import create_app
from pigeon.server.idempotency import IdempotencyPolicy
from pigeon.server.intake import Intake
from pigeon.server.options import IntakeOptions, ServerOptions
from pigeon.storage.base import Database

from .conftest import TestClient, failing_handler


def test_the_openapi_document_is_valid_and_states_the_contract(notes_db: Database) -> None:
    policy = IdempotencyPolicy(lock_timeout=45, response_retention=3600, claim_retention=7200)
    options = ServerOptions(intake=IntakeOptions(policy))
    with TestClient(create_notes_app(notes_db, options, purge_interval=None)) as client:
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
    assert key["required"] is True and key["schema"]["anyOf"][0]["maxLength"] == 255
    assert "/pigeon/v1/batch" in spec["paths"] and "/notes" in spec["paths"]
    assert "409" in spec["paths"]["/notes"]["post"]["responses"]
    assert "3600 s" in spec["info"]["description"]


def test_the_browser_page_stays_out_of_the_api_document(notes_db: Database) -> None:
    # The operations page answers a browser (HTML, redirects, a cross-site refusal): none of
    # that is the API's contract, so none of its routes may be published as one. The fuzz
    # test found POST /pigeon/login documented as a read that answers 200/400/404 only.
    with TestClient(create_notes_app(notes_db, purge_interval=None)) as client:
        paths = set(client.get("/pigeon/v1/openapi.json").json()["paths"])
        assert client.get("/pigeon/login").status_code == 200  # the page is served all the same
    page = {p for p in paths if p == "/pigeon/" or p.startswith(("/pigeon/login", "/pigeon/act"))}
    assert page == set() and "/pigeon/logout" not in paths
    assert "/pigeon/v1/dashboard" in paths  # the JSON twin is API, and stays


def _documented(operation: dict[str, Any], status: int) -> dict[str, Any] | None:
    responses = operation["responses"]
    return responses.get(str(status)) or responses.get(f"{str(status)[0]}XX")


def test_every_status_a_write_answers_is_in_its_contract(notes_db: Database) -> None:
    """A client generated from the document must know every answer the server gives,
    with the media type it comes in: the operation's own refusals (404, 409, 412) and a
    failed handler's 500 included, not only the idempotency layer's."""
    app = create_notes_app(notes_db, purge_interval=None)
    failing = Intake(notes_db)
    failing.add_operation("POST", "/notes", failing_handler("raise"))
    with (
        TestClient(app) as client,
        TestClient(create_app(failing, purge_interval=None)) as broken,
    ):
        spec = client.get("/pigeon/v1/openapi.json").json()
        keys = iter(range(1000))

        def send(method: str, path: str, body: Any = None, **headers: str) -> Any:
            sent = {"Idempotency-Key": f"k{next(keys)}"} | headers
            return client.request(method, path, json=body, headers=sent)

        answers = [
            ("/notes", "post", send("POST", "/notes", {"id": "1"})),  # 201
            ("/notes", "post", send("POST", "/notes", {"id": "1"})),  # 409 exists
            ("/notes/{id}", "put", send("PUT", "/notes/1", {}, **{"If-Match": '"9"'})),  # 412
            ("/notes/{id}", "patch", send("PATCH", "/notes/nope", {})),  # 404
            ("/notes/{id}", "delete", client.delete("/notes/1")),  # 400 no key
            ("/answers", "post", send("POST", "/answers", {})),  # 422 invalid
            ("/notes", "post", broken.post("/notes", json={}, headers={"Idempotency-Key": "b"})),
        ]
    assert {r.status_code for *_, r in answers} == {201, 409, 412, 404, 400, 422, 500}
    for path, method, reply in answers:
        documented = _documented(spec["paths"][path][method], reply.status_code)
        assert documented is not None, f"{method} {path} answered {reply.status_code}"
        media = reply.headers["content-type"].split(";")[0]
        assert media in documented.get("content", {}), (path, reply.status_code, media)


def test_the_published_request_schemas_agree_with_what_the_handlers_accept(
    notes_db: Database,
) -> None:
    """POST /answers was documented with the empty schema: its required fields showed only
    through a 422. Each example is judged by the document and by the server: same verdict."""
    import jsonschema

    app = create_notes_app(notes_db, purge_interval=None)
    with TestClient(app) as client:
        spec = client.get("/pigeon/v1/openapi.json").json()
        schema = spec["paths"]["/answers"]["post"]["requestBody"]["content"]["application/json"]
        assert schema["schema"]["required"] == ["question", "answer"]
        examples: list[Any] = [
            {"question": "q1", "answer": "42"},
            {"question": "q2", "answer": "42", "expected": "42", "notify": None},
            {"question": "q3"},
            {"question": "", "answer": "x"},
            {"question": "   ", "answer": "x"},
            {"question": "q4", "answer": "x", "expected": 7},
            ["not", "an", "object"],
        ]
        for n, body in enumerate(examples):
            documented = jsonschema.Draft202012Validator(schema["schema"]).is_valid(body)
            answer = client.post("/answers", json=body, headers={"Idempotency-Key": f"a{n}"})
            assert (answer.status_code == 202) is documented, (body, answer.status_code)
        note = spec["paths"]["/notes"]["post"]["requestBody"]["content"]["application/json"]
        assert note["schema"]["type"] == "object"

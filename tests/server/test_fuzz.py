"""Fuzzing the intake from its own contract, with a bounded budget (CI runs it).

schemathesis generates requests for every operation of ``/pigeon/v1/openapi.json``,
valid ones and invalid ones, against the notes app in process, on SQLite and on
PostgreSQL, authenticated as the document asks (a user's JWT, the operator's token), and
runs every check it has: no 5xx, every status and media type documented, and the
contract both ways: a request valid by the document is accepted (positive data
acceptance) and one invalid by it is refused (negative data rejection). What the
document says in words, because no JSON Schema can, the generator is taught by
tests/server/contract_hooks.py. For every request, a refused write left no effect behind
(the effect ledger is unchanged). A hypothesis property sends hostile JSON bodies too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

from pigeon.core.wire import BATCH_PATH
from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.server.access import OperatorToken
from pigeon.server.jwt_auth import JwtAuth
from pigeon.server.openapi import OPENAPI_PATH
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db

from . import contract_hooks
from .conftest import TestClient

BUDGET = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same requests on every run: a CI failure is reproducible
    suppress_health_check=list(HealthCheck),
)
# Per operation and backend: 25 requests (valid and invalid), the same on every run;
# shrinking a failure would take longer than the whole budget: the first one is shown.
CONTRACT_BUDGET = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[p for p in settings.default.phases if p.name != "shrink"],
    suppress_health_check=list(HealthCheck),
)
SECRET = "the-contract-tests-hs256-secret-0123456789abcdef"
OPERATOR = "operator-token-of-the-contract-tests"
# A valid request may still meet the state it finds: 404 (no such note), 409 (it
# exists, or its key is in progress) and 412 (a stale If-Match), as schemathesis allows
# all but the last by default.
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "412", "429", "5xx"]


def footprint(notes_db: Database) -> tuple[int, int]:
    with notes_db.transaction() as tx:
        row = tx.fetchone("claim_stats")
    assert row is not None
    return int(row["claims"]), len(read_ledger(notes_db))


def notes_app(notes_db: Database, **auth: Any) -> Any:
    return create_notes_app(
        notes_db,
        purge_interval=None,
        lww_collections=["lww-notes"],
        crdt_collections=["docs"],
        **auth,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Database]]:
    # One SQLite database for the hostile bodies: the budget goes to requests.
    notes_db = open_server_db(str(Path(tmp_path_factory.mktemp("fuzz")) / "server.db"))
    yield notes_app(notes_db), notes_db
    notes_db.close()


def _credentials(operation: Any) -> dict[str, str]:
    """The Authorization the operation's ``security`` asks for (the first it names)."""
    security = operation.definition.raw.get("security") or []
    names = [name for requirement in security for name in requirement]
    if not names:
        return {}
    if names[0] == "operator":
        return {"Authorization": f"Bearer {OPERATOR}"}
    claims = {"sub": "ada", "exp": int(time.time()) + 3600}
    return {"Authorization": "Bearer " + jwt.encode(claims, SECRET, algorithm="HS256")}


def _operation_failure(operation: Any, notes_db: Database) -> str | None:
    """25 generated requests (valid and invalid) of one operation, all of schemathesis'
    checks, and no effect left by a refusal: the first failure, or None."""
    cases = st.one_of(operation.as_strategy(generation_mode=mode) for mode in GenerationMode)
    credentials = _credentials(operation)

    @given(cases)
    @CONTRACT_BUDGET
    def run(case: Any) -> None:
        contract_hooks.prepare(case)
        case.headers = {**(case.headers or {}), **credentials}
        before = footprint(notes_db)
        response = case.call()
        case.validate_response(response, headers=case.headers)
        if response.status_code >= 400:  # a refusal may be stored, never an effect
            assert footprint(notes_db)[1] == before[1], (case.method, case.path)

    try:
        run()
    except Exception as exc:  # each operation's failure, all of them reported at once
        return f"{operation.label}: {str(exc)[:1500]}"
    return None


def _contract_failures(app: Any, notes_db: Database) -> list[str]:
    """Every operation of the document, and what failed, one entry per operation."""
    config = SchemathesisConfig.from_dict(
        {
            "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}},
            # The document's JsonValue (x-pigeon-json): no NUL in any string of a body.
            "generation": {"allow-x00": False},
        }
    )
    api = schemathesis.openapi.from_asgi(OPENAPI_PATH, app, config=config)
    failures = (_operation_failure(result.ok(), notes_db) for result in api.get_all_operations())
    return [failure for failure in failures if failure is not None]


def test_the_server_accepts_exactly_what_its_document_says(server_db_url: str) -> None:
    notes_db = open_server_db(server_db_url)
    try:
        app = notes_app(
            notes_db, authenticate=JwtAuth(secret=SECRET), operator=OperatorToken(OPERATOR)
        )
        with TestClient(app):  # the app's lifespan
            failures = _contract_failures(app, notes_db)
    finally:
        notes_db.close()
    assert not failures, "\n\n".join(failures)


json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and Infinity included: json.dumps writes them, pigeon refuses
    | st.text()  # lone surrogates and NUL included
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
tamper = st.sampled_from(["", "dup", "deep", "cut", "nul", "big", "lone"])


def hostile(value: Any, how: str) -> str:
    text = json.dumps({"id": "f", "v": value})
    if how == "dup":
        return text[:-1] + ', "v": 1}'
    if how == "deep":
        return text[:-1] + ', "d": ' + "[" * 250 + "]" * 250 + "}"
    if how == "cut":
        return text[: len(text) // 2]
    if how == "nul":
        return text[:-1] + ', "n": "\\u0000"}'
    if how == "lone":
        return text[:-1] + ', "s": "\\ud800"}'
    if how == "big":
        return text[:-1] + ', "b": 1e999}'
    return text


@given(json_values, tamper, st.sampled_from(["/notes", "/notes/f", "/lww-notes", BATCH_PATH]))
@BUDGET
def test_hostile_bodies_are_answered_4xx_and_store_nothing(
    served: tuple[Any, Database], value: Any, how: str, path: str
) -> None:
    app, notes_db = served
    body = hostile(value, how)
    if path == BATCH_PATH:
        entry = '{"idempotency_key": "fz", "method": "PUT", "path": "/notes/f", "body": '
        body = '{"operations": [' + entry + body + "}]}"
    before = footprint(notes_db)
    with TestClient(app) as client:
        method = "PUT" if path.endswith("/f") else "POST"
        reply = client.request(
            method,
            path,
            content=body,
            headers={"Idempotency-Key": "fuzz", "Content-Type": "application/json"},
        )
    assert reply.status_code < 500, reply.text
    results = reply.json().get("results", []) if path == BATCH_PATH else [reply.json()]
    refused = reply.status_code >= 400 or all(r.get("status", 0) >= 400 for r in results)
    if refused:  # no effect; and when the decoder refused it, not even a claim
        after = footprint(notes_db)
        assert after[1] == before[1], body[:200]
        if reply.status_code == 400 and "json_error" in reply.json():
            assert after == before, body[:200]

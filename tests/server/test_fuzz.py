"""Fuzzing the intake from its own contract, with a bounded budget (CI runs it).

schemathesis generates requests for every operation of ``/pigeon/v1/openapi.json``
(valid ones and, for the bodies, invalid ones) against the notes app in process; a
hypothesis property sends hostile JSON bodies of its own. For every request: no 5xx, the
status is one the document describes, and a refused write left no effect behind (the
effect ledger is unchanged; a body the decoder refused left no claim either).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, status_code_conformance

from pigeon.core.wire import BATCH_PATH
from pigeon.reference.notes import create_notes_app, read_ledger
from pigeon.storage.base import Database
from pigeon.storage.server import open_server_db

from .conftest import TestClient

BUDGET = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same requests on every run: a CI failure is reproducible
    suppress_health_check=list(HealthCheck),
)


def footprint(db: Database) -> tuple[int, int]:
    with db.transaction() as tx:
        row = tx.fetchone("claim_stats")
    assert row is not None
    return int(row["claims"]), len(read_ledger(db))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Database]]:
    # One SQLite database for the module: the PostgreSQL conformance is the input tests'
    # (test_input_classes); here the budget goes to requests, not to making databases.
    db = open_server_db(str(Path(tmp_path_factory.mktemp("fuzz")) / "server.db"))
    app = create_notes_app(
        db, purge_interval=None, lww_collections=["lww-notes"], crdt_collections=["docs"]
    )
    yield app, db
    db.close()


@pytest.fixture(scope="module")
def cases(served: tuple[Any, Database]) -> st.SearchStrategy[Any]:
    """Requests for every operation of the served document, valid and not."""
    app, _ = served
    api = schemathesis.openapi.from_asgi("/pigeon/v1/openapi.json", app)
    return st.one_of(api.as_strategy(mode) for mode in GenerationMode)


@given(st.data())
@BUDGET
def test_no_generated_request_gets_a_5xx_or_an_undocumented_status(
    served: tuple[Any, Database], cases: st.SearchStrategy[Any], data: st.DataObject
) -> None:
    _, db = served
    case = data.draw(cases)
    before = footprint(db)
    response = case.call()
    case.validate_response(
        response,
        checks=[not_a_server_error, status_code_conformance, content_type_conformance],
    )
    if response.status_code >= 400:  # a refusal may be stored under its key, no effect
        assert footprint(db)[1] == before[1], (case.method, case.path, response.text[:300])


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
    app, db = served
    body = hostile(value, how)
    if path == BATCH_PATH:
        entry = '{"idempotency_key": "fz", "method": "PUT", "path": "/notes/f", "body": '
        body = '{"operations": [' + entry + body + "}]}"
    before = footprint(db)
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
        after = footprint(db)
        assert after[1] == before[1], body[:200]
        if reply.status_code == 400 and "json_error" in reply.json():
            assert after == before, body[:200]

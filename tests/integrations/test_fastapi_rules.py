"""``@pigeon.idempotent`` keeps every rule of the intake inside the application's own
SQLAlchemy session: one effect per key, replays, refusals, what is stored and what frees
the key; on SQLite and PostgreSQL, with a sync ``Session`` and an ``AsyncSession``."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session

from pigeon.core.wire import MAX_JSON_DEPTH
from pigeon.integrations import fastapi as integration
from pigeon.integrations.fastapi import Pigeon, Refused
from tests.integrations.orders_app import counts, create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


@pytest.fixture
def client(app_db: str, mode: str) -> Iterator[TestClient]:
    app = create_app(app_db, asynchronous=mode == "async")
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def order(client: TestClient, key: str | None, user: str = "ada", **body: Any) -> Any:
    headers = {"X-User": user} | ({} if key is None else {"Idempotency-Key": key})
    return client.post("/orders", json={"item": "tea"} | body, headers=headers)


def test_one_key_one_row_one_job_and_a_replay(client: TestClient, app_db: str) -> None:
    first = order(client, "k1")
    again = order(client, "k1")
    assert first.status_code == again.status_code == 201
    assert again.content == first.content and again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert counts(app_db) == {"orders": 1, "jobs": 1, "claims": 1}


def test_another_request_under_the_key_is_422_and_changes_nothing(
    client: TestClient, app_db: str
) -> None:
    assert order(client, "k1").status_code == 201
    other = order(client, "k1", item="coffee")
    assert other.status_code == 422
    assert other.headers["content-type"] == "application/problem+json"
    assert other.json()["type"].endswith("key-reused")
    assert counts(app_db) == {"orders": 1, "jobs": 1, "claims": 1}


@pytest.mark.parametrize("key", [None, "", "a" * 256])
def test_a_missing_or_bad_key_is_400_and_stores_nothing(
    client: TestClient, app_db: str, key: str | None
) -> None:
    refused = order(client, key)
    assert refused.status_code == 400 and refused.json()["type"].endswith("bad-idempotency-key")
    assert counts(app_db) == {"orders": 0, "jobs": 0, "claims": 0}


def test_a_body_fastapi_refuses_claims_nothing(client: TestClient, app_db: str) -> None:
    refused = client.post("/orders", json={"nothing": 1}, headers={"Idempotency-Key": "k1"})
    assert refused.status_code == 422 and "detail" in refused.json()
    assert counts(app_db)["claims"] == 0
    assert order(client, "k1").status_code == 201  # the corrected request, the same key


DEEP = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)


@pytest.mark.parametrize(
    "item",
    [
        pytest.param("NaN", id="NaN"),
        pytest.param("Infinity", id="Infinity"),
        pytest.param("-Infinity", id="-Infinity"),
        pytest.param("1e400", id="beyond-a-double"),
        pytest.param('"tea", "item": "tea"', id="a-key-twice"),
        pytest.param('"\\ud800"', id="a-lone-surrogate"),
        pytest.param(DEEP, id="too-deep"),
    ],
)
def test_a_body_no_strict_decoder_takes_is_refused_before_fastapi_validates_it(
    client: TestClient, app_db: str, item: str
) -> None:
    # FastAPI's lax decoder takes these; its 422 would quote NaN, which no JSON can say.
    headers = {"Idempotency-Key": "k1", "Content-Type": "application/json"}
    refused = client.post("/orders", content=f'{{"item": {item}}}', headers=headers)
    assert refused.status_code == 400, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"].endswith("bad-json")
    assert counts(app_db) == {"orders": 0, "jobs": 0, "claims": 0}
    assert order(client, "k1").status_code == 201  # the key is free


def test_the_key_is_refused_before_fastapi_validates_the_body(client: TestClient) -> None:
    refused = client.post("/orders", json={"nothing": 1})
    assert refused.status_code == 400 and refused.json()["type"].endswith("bad-idempotency-key")


class Item(BaseModel):
    n: int


def unopened() -> Session:
    raise AssertionError("the route's session was opened for a refused request")


def test_without_install_a_refusal_is_fastapis_400_and_nothing_of_the_route_runs() -> None:
    pigeon = Pigeon()
    app = FastAPI()

    @app.post("/items")
    @pigeon.idempotent
    def create(item: Item, db: Annotated[Session, Depends(unopened)]) -> Any:
        raise AssertionError("the handler ran for a refused request")

    headers = {"Idempotency-Key": "k1", "Content-Type": "application/json"}
    with TestClient(app, raise_server_exceptions=False) as test_client:
        refused = test_client.post("/items", content='{"n": NaN}', headers=headers)
    assert refused.status_code == 400 and "NaN" in refused.json()["detail"]


def test_a_body_is_read_first_once_however_often_pigeons_are_installed() -> None:
    """``install`` adds the middleware that reads a guarded route's body before FastAPI:
    once per app for each Pigeon, installed twice or not."""
    first, second, app = Pigeon(), Pigeon(), FastAPI()
    for pigeon in (first, first, second, second):
        pigeon.install(app)
    takers = [m.kwargs.get("take") for m in app.user_middleware]
    assert takers.count(first._take) == 1 and takers.count(second._take) == 1


def test_an_app_answers_refusals_its_own_way_with_a_handler_for_refused() -> None:
    pigeon = Pigeon()
    app = FastAPI()
    pigeon.install(app)
    seen: list[int] = []

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        seen.append(exc.result.status)
        return JSONResponse({"error": exc.detail}, exc.status_code, exc.headers)

    @app.post("/items")
    @pigeon.idempotent
    def create(item: Item, db: Annotated[Session, Depends(unopened)]) -> Any:
        raise AssertionError("the handler ran for a refused request")

    with TestClient(app, raise_server_exceptions=False) as test_client:
        answer = test_client.post("/items", json={"n": 1})  # no Idempotency-Key
    assert answer.status_code == 400 and seen == [400]
    assert "Idempotency-Key" in answer.json()["error"]


def test_the_integrations_names() -> None:
    assert set(integration.__all__) == {
        "Pigeon",
        "Refused",
        "defer",
        "defer_async",
        "principal_from",
        "session_tx",
        "sqlalchemy_url",
    }
    for name in integration.__all__:
        assert getattr(integration, name) is not None


@pytest.mark.parametrize("fail", ["raise", "500", "429", "commit"])
def test_a_failure_rolls_back_the_row_the_job_and_the_claim(
    client: TestClient, app_db: str, fail: str
) -> None:
    failed = order(client, "k1", fail=fail)
    assert failed.status_code == (429 if fail == "429" else 500)
    assert counts(app_db) == {"orders": 0, "jobs": 0, "claims": 0}
    assert order(client, "k1", fail=fail).status_code == failed.status_code  # it ran again
    done = order(client, "k1")  # the key is free: the retry runs
    assert done.status_code == 201 and "idempotent-replayed" not in done.headers
    assert counts(app_db) == {"orders": 1, "jobs": 1, "claims": 1}


def test_a_stored_4xx_is_replayed_and_its_writes_rolled_back(
    client: TestClient, app_db: str
) -> None:
    refused = order(client, "k1", fail="400")
    assert refused.status_code == 400 and refused.json() == {"detail": "refused with 400"}
    again = order(client, "k1", fail="400")
    assert again.status_code == 400 and again.headers["idempotent-replayed"] == "true"
    assert again.content == refused.content
    assert counts(app_db) == {"orders": 0, "jobs": 0, "claims": 1}


def test_two_principals_never_share_a_key(client: TestClient, app_db: str) -> None:
    ada, bob = order(client, "k1", user="ada"), order(client, "k1", user="bob")
    assert ada.status_code == bob.status_code == 201
    assert "idempotent-replayed" not in bob.headers
    assert (ada.json()["owner"], bob.json()["owner"]) == ("ada", "bob")
    assert order(client, "k1", user="bob").json() == bob.json()
    assert counts(app_db) == {"orders": 2, "jobs": 2, "claims": 2}


def test_the_openapi_document_has_the_header_and_the_refusals(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/orders"]["post"]
    (key,) = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
    assert key["in"] == "header" and key["required"] is True
    responses = operation["responses"]
    for status in ("400", "409", "422", "503"):
        assert "application/problem+json" in responses[status]["content"], status
    assert "application/json" in responses["422"]["content"]  # FastAPI's own, kept
    params = {p["name"] for p in operation["parameters"]}
    assert not params & {"caller", "key", "pigeon_incoming_"}  # nothing hidden leaks

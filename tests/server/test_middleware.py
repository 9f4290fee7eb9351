"""IdempotencyMiddleware around a plain Starlette app that keeps its own state."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pigeon.server.idempotency import DAY, IdempotencyPolicy
from pigeon.server.middleware import IdempotencyMiddleware
from pigeon.storage.base import Database

from .conftest import FakeClock, TestClient


def make(db: Database, clock: FakeClock) -> tuple[TestClient, list[Any]]:
    effects: list[Any] = []

    async def charge(request: Request) -> Response:
        body = await request.json()
        if body.get("fail"):
            return JSONResponse({"detail": "upstream down"}, status_code=502)
        effects.append(body)
        return JSONResponse({"charge": len(effects), "amount": body["amount"]}, status_code=201)

    async def show(request: Request) -> Response:
        return JSONResponse({"effects": len(effects)})

    app = Starlette(routes=[Route("/charges", charge, methods=["POST"]), Route("/charges", show)])
    policy = IdempotencyPolicy(lock_timeout=10, response_retention=DAY, claim_retention=2 * DAY)
    wrapped = IdempotencyMiddleware(app, db, policy=policy, now=clock)
    return TestClient(wrapped), effects


def test_the_middleware_replays_refuses_and_releases(db: Database, clock: FakeClock) -> None:
    client, effects = make(db, clock)
    key = {"Idempotency-Key": "c1"}
    first = client.post("/charges", json={"amount": 5}, headers=key)
    again = client.post("/charges", content=b'{"amount":  5}', headers=key)
    assert first.status_code == 201 and again.status_code == 201
    assert again.content == first.content and again.headers["idempotent-replayed"] == "true"
    assert client.post("/charges", json={"amount": 6}, headers=key).status_code == 422
    assert client.post("/charges", json={"amount": 5}).status_code == 400
    other = client.post(
        "/charges", json={"amount": 5}, headers={"Authorization": "Bearer bob.1"} | key
    )
    assert other.status_code == 201 and "idempotent-replayed" not in other.headers
    assert client.get("/charges").json() == {"effects": 2}  # reads pass straight through

    failed = client.post(
        "/charges", json={"amount": 1, "fail": True}, headers={"Idempotency-Key": "c2"}
    )
    assert failed.status_code == 502
    retried = client.post(
        "/charges", json={"amount": 1, "fail": True}, headers={"Idempotency-Key": "c2"}
    )
    assert "idempotent-replayed" not in retried.headers  # 5xx was not stored: it ran again

    clock.advance(DAY + 1)
    late = client.post("/charges", json={"amount": 5}, headers=key)
    assert late.status_code == 200 and late.json()["status"] == "already_applied"
    assert len(effects) == 2


def test_the_middleware_answers_409_while_a_claim_is_held(db: Database, clock: FakeClock) -> None:
    client, effects = make(db, clock)
    from pigeon.server.fingerprint import fingerprint

    wrapped = client.app
    assert isinstance(wrapped, IdempotencyMiddleware)
    with db.transaction() as tx:  # a process that claimed the key and died before storing
        wrapped.store.claim(
            tx,
            principal="anonymous",
            key="k",
            fingerprint=fingerprint("POST", "/charges", {"amount": 1}),
            method="POST",
            path="/charges",
            operation_id="k",
        )
    busy = client.post("/charges", json={"amount": 1}, headers={"Idempotency-Key": "k"})
    assert busy.status_code == 409 and busy.headers["retry-after"] == "10"
    clock.advance(11)
    # The weaker guarantee, documented: after the lock timeout the request runs again.
    assert (
        client.post("/charges", json={"amount": 1}, headers={"Idempotency-Key": "k"}).status_code
        == 201
    )
    assert len(effects) == 1

"""IdempotencyMiddleware around a plain Starlette app that keeps its own state."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from pigeon.server.idempotency import DAY, IdempotencyPolicy, SqlIdempotencyStore
from pigeon.server.middleware import IdempotencyMiddleware
from pigeon.storage.base import Database
from tests.clocks import FakeClock

from .conftest import TestClient, live_server


def make(notes_db: Database, server_clock: FakeClock) -> tuple[TestClient, list[Any]]:
    effects: list[Any] = []

    async def charge(request: Request) -> Response:
        body = await request.json()
        if not isinstance(body.get("amount"), int):
            return JSONResponse({"detail": "amount must be an integer"}, status_code=400)
        if body.get("fail"):
            return JSONResponse({"detail": "upstream down"}, status_code=502)
        effects.append(body)
        return JSONResponse({"charge": len(effects), "amount": body["amount"]}, status_code=201)

    async def show(request: Request) -> Response:
        return JSONResponse({"effects": len(effects)})

    app = Starlette(routes=[Route("/charges", charge, methods=["POST"]), Route("/charges", show)])
    policy = IdempotencyPolicy(lock_timeout=10, response_retention=DAY, claim_retention=2 * DAY)
    wrapped = IdempotencyMiddleware(app, notes_db, policy=policy, now=server_clock)
    return TestClient(wrapped), effects


def test_the_middleware_replays_refuses_and_releases(
    notes_db: Database, server_clock: FakeClock
) -> None:
    client, effects = make(notes_db, server_clock)
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

    # The app's own 400 (an invalid request) is not stored: corrected, the same key runs.
    fixed = {"Idempotency-Key": "c3"}
    assert client.post("/charges", json={"amount": "x"}, headers=fixed).status_code == 400
    assert client.post("/charges", json={"amount": 7}, headers=fixed).status_code == 201
    assert client.get("/charges").json() == {"effects": 3}

    failed = client.post(
        "/charges", json={"amount": 1, "fail": True}, headers={"Idempotency-Key": "c2"}
    )
    assert failed.status_code == 502
    retried = client.post(
        "/charges", json={"amount": 1, "fail": True}, headers={"Idempotency-Key": "c2"}
    )
    assert "idempotent-replayed" not in retried.headers  # 5xx was not stored: it ran again

    server_clock.advance(DAY + 1)
    late = client.post("/charges", json={"amount": 5}, headers=key)
    assert late.status_code == 200 and late.json()["status"] == "already_applied"
    assert len(effects) == 3


def test_the_middleware_answers_409_while_a_claim_is_held(
    notes_db: Database, server_clock: FakeClock
) -> None:
    client, effects = make(notes_db, server_clock)
    from pigeon.server.fingerprint import fingerprint

    wrapped = client.app
    assert isinstance(wrapped, IdempotencyMiddleware)
    with notes_db.transaction() as tx:  # a process that claimed the key and died before storing
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
    server_clock.advance(11)
    # The weaker guarantee, documented: after the lock timeout the request runs again.
    assert (
        client.post("/charges", json={"amount": 1}, headers={"Idempotency-Key": "k"}).status_code
        == 201
    )
    assert len(effects) == 1


def _app_with(handler: Any) -> Starlette:
    return Starlette(routes=[Route("/things", handler, methods=["POST"])])


def test_the_middleware_keeps_a_refusal_a_refusal_and_does_not_store_not_now(
    notes_db: Database, server_clock: FakeClock
) -> None:
    calls: list[str] = []

    async def things(request: Request) -> Response:
        kind = (await request.json())["kind"]
        calls.append(kind)
        if kind == "refused":
            return JSONResponse({"detail": "no"}, status_code=409)
        if kind == "later" and calls.count("later") == 1:
            return JSONResponse({"detail": "slow down"}, status_code=429)
        return JSONResponse({"ok": kind}, status_code=201)

    policy = IdempotencyPolicy(lock_timeout=10, response_retention=DAY, claim_retention=2 * DAY)
    client = TestClient(
        IdempotencyMiddleware(_app_with(things), notes_db, policy=policy, now=server_clock)
    )
    assert (
        client.post("/things", json={"kind": "later"}, headers={"Idempotency-Key": "l"}).status_code
        == 429
    )
    again = client.post("/things", json={"kind": "later"}, headers={"Idempotency-Key": "l"})
    assert again.status_code == 201 and "idempotent-replayed" not in again.headers  # ran again
    assert (
        client.post(
            "/things", json={"kind": "refused"}, headers={"Idempotency-Key": "r"}
        ).status_code
        == 409
    )
    server_clock.advance(DAY + 1)  # the stored body is purged: the key answers "already applied"
    late = client.post("/things", json={"kind": "refused"}, headers={"Idempotency-Key": "r"})
    assert late.status_code == 409 and late.json()["status"] == "already_applied"
    assert late.headers["idempotent-replayed"] == "true"
    assert calls == ["later", "later", "refused"]


def test_the_middleware_fingerprints_the_query_string(
    notes_db: Database, server_clock: FakeClock
) -> None:
    client, effects = make(notes_db, server_clock)
    key = {"Idempotency-Key": "q"}
    assert client.post("/charges?qty=1", json={"amount": 5}, headers=key).status_code == 201
    same = client.post("/charges?qty=1", json={"amount": 5}, headers=key)
    assert same.headers["idempotent-replayed"] == "true"
    assert client.post("/charges?qty=1000", json={"amount": 5}, headers=key).status_code == 422
    assert len(effects) == 1


def test_the_middleware_renews_the_claim_of_a_slow_request(notes_db: Database) -> None:
    # Real time: the renewal timer and the lock timeout run on the same clock in production.
    runs: list[int] = []
    started = asyncio.Event()

    async def slow(request: Request) -> Response:
        runs.append(1)
        started.set()
        await asyncio.sleep(1.2)  # twice the lock timeout
        return JSONResponse({"runs": len(runs)}, status_code=201)

    policy = IdempotencyPolicy(lock_timeout=0.6, response_retention=DAY, claim_retention=2 * DAY)
    app = IdempotencyMiddleware(_app_with(slow), notes_db, policy=policy)

    async def scenario() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            send = lambda: client.post("/things", json={}, headers={"Idempotency-Key": "s"})  # noqa: E731
            first = asyncio.create_task(send())
            await started.wait()
            await asyncio.sleep(0.9)  # past the lock timeout: only renewal keeps the claim
            retry = await send()
            return await first, retry

    first, retry = asyncio.run(scenario())
    assert first.status_code == 201
    assert retry.status_code == 409 and "retry-after" in retry.headers
    assert runs == [1]


def test_the_middleware_passes_a_streamed_response_whole_and_stores_it_whole(
    notes_db: Database,
) -> None:
    """Starlette's StreamingResponse (ASGI spec < 2.4, as uvicorn's HTTP says) listens for
    the client's disconnect while it streams. The body the middleware hands the app must
    not be followed by a made-up ``http.disconnect``: that cancelled the stream after its
    first chunk, and the truncated body was sent and stored as the key's answer."""
    runs: list[int] = []

    async def export(request: Request) -> Response:
        await request.body()
        runs.append(1)

        async def rows() -> Any:
            for i in range(5):
                await asyncio.sleep(0.02)
                yield f"row {i}\n".encode()

        return StreamingResponse(rows(), status_code=201, media_type="text/plain")

    app = IdempotencyMiddleware(_app_with(export), notes_db)
    expected = "".join(f"row {i}\n" for i in range(5))
    with live_server(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        first = client.post("/things", json={}, headers={"Idempotency-Key": "x"})
        again = client.post("/things", json={}, headers={"Idempotency-Key": "x"})
    assert (first.status_code, first.text) == (201, expected)
    assert (again.status_code, again.text) == (201, expected)
    assert again.headers["idempotent-replayed"] == "true"
    # A client that gives up in the middle of the stream gets the whole answer on its
    # retry: the app was not told it left, so it finished, and the whole body was stored.
    with live_server(app) as url, httpx.Client(base_url=url, timeout=0.03) as client:
        with pytest.raises(httpx.TimeoutException):
            client.post("/things", json={}, headers={"Idempotency-Key": "gone"})
        client.timeout = httpx.Timeout(10)
        deadline = time.monotonic() + 10
        while len(runs) < 2 or _claim_state(notes_db, "gone") != "completed":  # still streaming
            assert time.monotonic() < deadline, "the abandoned request never completed"
            time.sleep(0.02)
        late = client.post("/things", json={}, headers={"Idempotency-Key": "gone"})
    assert (late.status_code, late.text) == (201, expected)
    assert late.headers["idempotent-replayed"] == "true"
    assert runs == [1, 1]


def test_the_middleware_fingerprints_json_nested_too_deep_by_its_bytes(
    notes_db: Database, server_clock: FakeClock
) -> None:
    # Parsing it for the fingerprint raised RecursionError, which is no ValueError: 500.
    runs: list[int] = []

    async def things(request: Request) -> Response:
        runs.append(1)
        return JSONResponse({"size": len(await request.body())}, status_code=201)

    client = TestClient(IdempotencyMiddleware(_app_with(things), notes_db, now=server_clock))
    deep = "[" * 5000 + "]" * 5000
    key = {"Idempotency-Key": "deep"}
    first = client.post("/things", content=deep, headers=key)
    again = client.post("/things", content=deep, headers=key)
    other = client.post("/things", content=deep + " ", headers=key)
    assert (first.status_code, again.headers["idempotent-replayed"]) == (201, "true")
    assert other.status_code == 422 and runs == [1]


def test_the_middleware_refuses_a_principal_too_long_to_scope_a_key(
    notes_db: Database, server_clock: FakeClock
) -> None:
    client, effects = make(notes_db, server_clock)
    token = {"Authorization": "Bearer " + "p" * 256 + ".t", "Idempotency-Key": "k"}
    reply = client.post("/charges", json={"amount": 1}, headers=token)
    assert reply.status_code == 401 and "256 characters" in reply.json()["detail"]
    assert effects == []


def _claim_state(notes_db: Database, key: str) -> str | None:
    with notes_db.transaction() as tx:
        row = SqlIdempotencyStore().get(tx, "anonymous", key)
    return None if row is None else str(row["state"])


def test_the_middleware_refuses_a_body_over_its_limit_before_claiming(
    notes_db: Database, server_clock: FakeClock
) -> None:
    effects: list[Any] = []

    async def charge(request: Request) -> Response:
        effects.append(await request.body())
        return JSONResponse({"ok": True}, status_code=201)

    app = Starlette(routes=[Route("/charges", charge, methods=["POST"])])
    client = TestClient(IdempotencyMiddleware(app, notes_db, now=server_clock, max_body=100))
    key = {"Idempotency-Key": "big"}
    refused = client.post("/charges", content=b'{"x": "' + b"y" * 200 + b'"}', headers=key)
    assert refused.status_code == 413
    assert refused.headers["content-type"] == "application/problem+json"
    assert "at most 100 bytes" in refused.json()["detail"] and effects == []
    with notes_db.transaction() as tx:  # nothing claimed: the key runs when the body fits
        assert (
            SqlIdempotencyStore(IdempotencyPolicy(), now=server_clock).get(tx, "anonymous", "big")
            is None
        )
    assert client.post("/charges", json={"x": 1}, headers=key).status_code == 201
    assert len(effects) == 1

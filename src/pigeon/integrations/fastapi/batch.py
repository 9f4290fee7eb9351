"""``POST /pigeon/v1/batch`` for a FastAPI application: the edge's batches, each operation
answered by the application's own ``@idempotent`` route.

The batch is read and its entries checked by the intake's code (`pigeon.server.batch_wire`:
``read_batch``, ``results_json``, and the refusals of ``pigeon serve``'s batch route); each
operation is then sent, in order, through the application itself (its middleware, its
authentication: the batch's headers go with every operation) as a request of its own to
its route, with its own key. Each operation commits on its own, as with the intake's
``batch_chunk=1``: a resent batch replays the operations that committed. The batch stops
after the first answer that means "not now" (a 5xx, 401/403/408/425/429, 409 in
progress), so nothing overtakes it.

The body (up to 16 MiB) is read into one buffer; it is decoded, each operation's body
encoded for its route and the answer written in a worker thread, and the answer is sent in
slices, as ``pigeon serve``'s route does: never a whole copy, a decode or an encode on the
event loop, where they held up every other request of the process. No more than
``BATCHES_AT_ONCE`` batches are read and answered at once, as in ``pigeon serve``, so
that the memory a batch holds until its last operation is answered stays bounded.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.types import Message, Scope

from pigeon.core.wire import BATCH_PATH, CLOCK, IDEMPOTENCY_KEY, IF_MATCH, quote_etag
from pigeon.integrations.fastapi.answers import answer
from pigeon.server.app import BATCHES_AT_ONCE
from pigeon.server.batch_wire import read_batch, results_json, sent_in_slices
from pigeon.server.contract import OPERATION_ID
from pigeon.server.limits import DEFAULT_MAX_BATCH_BODY
from pigeon.server.messages import read_json_buffer
from pigeon.server.operations import OperationRequest
from pigeon.server.results import NOT_STORED_4XX, OpResult

# Headers of the batch request that are not each operation's: the operation sets its own.
_OWN = frozenset(
    name.lower().encode("latin-1")
    for name in (IDEMPOTENCY_KEY, IF_MATCH, CLOCK, OPERATION_ID, "content-length", "content-type")
)


def add_batch_route(
    app: FastAPI, path: str = BATCH_PATH, *, max_body: int = DEFAULT_MAX_BATCH_BODY
) -> None:
    """Serve the edge's batch at ``path`` (``Pigeon.install(app, batch=True)`` calls it),
    a batch's body at most ``max_body`` bytes."""
    turns = anyio.CapacityLimiter(BATCHES_AT_ONCE)

    async def batch(request: Request) -> Response:
        raw = await read_json_buffer(request, max_body, "a batch request")
        if isinstance(raw, OpResult):
            return answer(raw)
        held: list[Any] = [raw]  # the only reference, emptied as the bytes become text
        del raw
        async with turns:
            batch = await anyio.to_thread.run_sync(_read, held)
            if isinstance(batch, OpResult):
                return answer(batch)
            ids, ops = batch
            del batch
            results: list[OpResult] = []
            for op in ops:
                result = op if isinstance(op, OpResult) else await _send(request, *op)
                results.append(result)
                if _not_now(result):
                    break
            del ops
            text = await anyio.to_thread.run_sync(results_json, ids, results)
        return sent_in_slices(text)

    app.add_api_route(path, batch, methods=["POST"], summary="Apply a batch of operations")


_Encoded = tuple[OperationRequest, bytes]


def _read(held: list[Any]) -> tuple[list[str | None], list[OpResult | _Encoded]] | OpResult:
    """``read_batch``, then each operation's body encoded for its route: in the worker
    thread, since one body may be most of the batch's 16 MiB."""
    batch = read_batch(held)
    if isinstance(batch, OpResult):
        return batch
    ids, ops = batch
    return ids, encoded_bodies(ops)


def encoded_bodies(ops: list[OperationRequest | OpResult]) -> list[OpResult | _Encoded]:
    """Each operation beside its body as the bytes its route reads; refusals as they are."""
    return [
        op if isinstance(op, OpResult) else (op, json.dumps(op.body).encode("utf-8")) for op in ops
    ]


def _not_now(result: OpResult) -> bool:
    headers = dict(result.headers)
    in_progress = result.status == 409 and "retry-after" in headers
    return (
        result.transient or result.status >= 500 or result.status in NOT_STORED_4XX or in_progress
    )


async def _send(request: Request, op: OperationRequest, body: bytes) -> OpResult:
    """``op`` (its body encoded as ``body``) through the application, as a request of its
    own; its answer."""
    headers = [(k, v) for k, v in request.scope["headers"] if k.lower() not in _OWN]
    headers += [
        (b"idempotency-key", op.key.encode("latin-1")),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if op.operation_id != op.key:
        headers.append((OPERATION_ID.lower().encode(), op.operation_id.encode("latin-1")))
    if op.clock:
        headers.append((CLOCK.lower().encode(), op.clock.encode("latin-1")))
    if op.if_match is not None:
        headers.append((b"if-match", quote_etag(op.if_match).encode("latin-1")))
    scope: Scope = {
        **{
            k: v
            for k, v in request.scope.items()
            if k
            in ("type", "http_version", "scheme", "server", "client", "root_path", "app", "state")
        },
        "method": op.method,
        "path": op.path,
        "raw_path": op.path.encode("utf-8"),
        "query_string": b"",
        "headers": headers,
    }
    return await _call(request.app, scope, body)


async def _call(app: Any, scope: Scope, body: bytes) -> OpResult:
    sent = False
    status, out_headers, chunks = 500, [], []

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status, out_headers
        if message["type"] == "http.response.start":
            status = message["status"]
            out_headers = message.get("headers", [])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    kept = tuple(
        (k.decode("latin-1").lower(), v.decode("latin-1"))
        for k, v in out_headers
        if k.lower() not in (b"content-length",)
    )
    return OpResult(
        status,
        b"".join(chunks).decode("utf-8"),
        kept,
        replayed=("idempotent-replayed", "true") in kept,
    )

"""``IdempotencyMiddleware``: Idempotency-Key semantics for any ASGI application.

For applications that cannot hand their writes to the intake's transaction. The key is
claimed in its own transaction (``in_progress`` with a lock timeout), the wrapped
application runs, and its response is stored in a second transaction.

WEAKER GUARANTEE than ``Intake``: the application's effect and the stored response are
not atomic. If the process dies after the application committed its effect but before
the response is stored, the claim is orphaned; once ``lock_timeout`` has passed a retry
runs the application AGAIN (a second effect). Use the intake (handlers receiving
``ctx.tx``) wherever the effect lives in the same database.

Everything else matches the intake: 400 for a missing/malformed key, replay with
``Idempotent-Replayed: true``, 409 + ``Retry-After`` while in progress, 422 for a
reused key, 2xx/4xx stored, 5xx and exceptions release the key, 503 when the store is
unavailable, principal scoping, retention and "already applied".
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pigeon.exceptions import AuthorizationRequired
from pigeon.protocol.wire import IDEMPOTENCY_KEY, REPLAYED, canonical_json
from pigeon.server.app import render
from pigeon.server.auth import Authenticator, BearerAuth
from pigeon.server.fingerprint import InvalidIdempotencyKey, fingerprint, validate_key
from pigeon.server.idempotency import (
    Claim,
    Decision,
    IdempotencyPolicy,
    IdempotencyStore,
    Outcome,
    StoredResponse,
)
from pigeon.server.intake import WRITE_METHODS
from pigeon.server.results import STORE_DOWN, problem_result, store_unavailable
from pigeon.storage.base import Database

_NOT_STORED = {b"content-length", b"date", b"server", b"transfer-encoding", b"connection"}


class IdempotencyMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        db: Database,
        *,
        policy: IdempotencyPolicy | None = None,
        now: Callable[[], float] = time.time,
        authenticate: Authenticator | None = None,
        methods: Iterable[str] = WRITE_METHODS,
        paths: Iterable[str] = ("/",),
    ) -> None:
        self.app = app
        self.db = db
        self.store = IdempotencyStore(policy, now=now)
        self.authenticate = authenticate or BearerAuth()
        self.methods = frozenset(m.upper() for m in methods)
        self.paths = tuple(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in self.methods
            or not scope["path"].startswith(self.paths)
        ):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            principal = self.authenticate(request)
            key = validate_key(request.headers.getlist(IDEMPOTENCY_KEY))
        except AuthorizationRequired as exc:
            result = problem_result(exc.status or 401, "unauthorized", "Unauthorized", str(exc))
            await render(result)(scope, receive, send)
            return
        except InvalidIdempotencyKey as exc:
            result = problem_result(400, "bad-idempotency-key", "Bad request", str(exc))
            await render(result)(scope, receive, send)
            return
        raw = await request.body()
        try:
            decision = await run_in_threadpool(self._claim, principal, key, scope, raw)
        except STORE_DOWN as exc:
            await render(store_unavailable(exc))(scope, receive, send)
            return
        if decision.claim is None:
            await self._refuse(decision, key, scope, receive, send)
            return
        await self._run(decision.claim, raw, scope, send)

    def _claim(self, principal: str, key: str, scope: Scope, raw: bytes) -> Decision:
        try:
            body: Any = json.loads(raw) if raw.strip() else None
        except ValueError:
            body = {"raw": base64.b64encode(raw).decode("ascii")}
        with self.db.transaction() as tx:
            return self.store.claim(
                tx,
                principal=principal,
                key=key,
                fingerprint=fingerprint(scope["method"], scope["path"], body),
                method=scope["method"],
                path=scope["path"],
                operation_id=key,
            )

    async def _run(self, claim: Claim, raw: bytes, scope: Scope, send: Send) -> None:
        start: Message = {}
        chunks: list[bytes] = []
        delivered = False

        async def replay_body() -> Message:
            nonlocal delivered
            if delivered:
                return {"type": "http.disconnect"}
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self.app(scope, replay_body, capture)
        except BaseException:
            await run_in_threadpool(self._release, claim)
            raise
        status = int(start.get("status", 500))
        headers: list[tuple[bytes, bytes]] = list(start.get("headers", []))
        body = b"".join(chunks)
        if status >= 500:
            await run_in_threadpool(self._release, claim)
        else:
            stored = _stored(status, headers, body)
            with contextlib.suppress(*STORE_DOWN):
                # If this fails the claim stays in progress until lock_timeout: see above.
                await run_in_threadpool(self._complete, claim, stored)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _release(self, claim: Claim) -> None:
        with contextlib.suppress(*STORE_DOWN), self.db.transaction() as tx:
            self.store.release(tx, claim)

    def _complete(self, claim: Claim, stored: StoredResponse) -> None:
        with self.db.transaction() as tx:
            self.store.complete(tx, claim, stored)

    async def _refuse(
        self, decision: Decision, key: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        if decision.outcome is Outcome.REPLAY and decision.response is not None:
            stored = decision.response
            body = (
                base64.b64decode(stored.body)
                if stored.body_format == "base64"
                else stored.body.encode("utf-8")
            )
            headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in stored.headers]
            headers += [
                (b"content-length", str(len(body)).encode()),
                (REPLAYED.lower().encode(), b"true"),
            ]
            await send({"type": "http.response.start", "status": stored.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        if decision.outcome is Outcome.ALREADY_APPLIED:
            payload = {
                "status": "already_applied",
                "operation_id": decision.operation_id,
                "idempotency_key": key,
                "original_status": decision.original_status,
                "completed_at": decision.completed_at,
            }
            body = canonical_json(payload).encode("utf-8")
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (REPLAYED.lower().encode(), b"true"),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        if decision.outcome is Outcome.IN_PROGRESS:
            result = problem_result(
                409,
                "key-in-progress",
                "Request in progress",
                f"a request with this key is still running; retry in {decision.retry_after} s",
            )
            response = render(result)
            response.headers["retry-after"] = str(decision.retry_after)
            await response(scope, receive, send)
            return
        result = problem_result(
            422,
            "key-reused",
            "Idempotency-Key reused",
            "this Idempotency-Key was used for a different request; the original is unchanged",
        )
        await render(result)(scope, receive, send)


def _stored(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> StoredResponse:
    kept = tuple(
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in headers
        if k.lower() not in _NOT_STORED
    )
    try:
        return StoredResponse(status, body.decode("utf-8"), kept, body_format="text")
    except UnicodeDecodeError:
        return StoredResponse(status, base64.b64encode(body).decode("ascii"), kept, "base64")

"""``IdempotencyMiddleware``: Idempotency-Key semantics for any ASGI application.

For applications that cannot hand their writes to the intake's transaction. The key is
claimed in its own transaction (``in_progress`` with a lock timeout), the wrapped
application runs, and its response is stored in a second transaction.

WEAKER GUARANTEE than ``Intake``: the application's effect and the stored response are
not atomic. If the process dies after the application committed its effect but before
the response is stored, the claim is orphaned; once ``lock_timeout`` has passed a retry
runs the application AGAIN (a second effect). Use the intake (handlers receiving
``ctx.tx``) wherever the effect lives in the same database. While the application runs,
its claim is renewed every third of ``lock_timeout``, so a slow request is never run a
second time while its process lives. The app's response, streamed or not, is collected
whole before anything is sent, and the app is never told of the client's disconnect: the
answer is the key's, stored and replayed, not the connection's.

Everything else matches the intake: 400 for a missing/malformed key, replay with
``Idempotent-Replayed: true``, 409 + ``Retry-After`` while in progress, 422 for a
reused key (the fingerprint covers the query string, which the wrapped app sees), 2xx
and 4xx stored except those the client sends again (401, 403, 408, 425, 429) and the
app's own 400 and 422 (a request it refused as invalid: the intake's validation before
the claim, which a wrapped app can only signal this way); 5xx and exceptions release the
key, 503 when the store is unavailable, principal scoping, retention and "already
applied" (which keeps a refusal's status). A request without credentials is refused (401)
unless ``allow_anonymous`` (by default, only with the ``BearerAuth`` stand-in, as
``create_app``); the wrapped app decides the rest of its access.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pigeon.core import strictjson
from pigeon.core.strictjson import JsonRefused
from pigeon.core.wire import IDEMPOTENCY_KEY, REPLAYED
from pigeon.exceptions import AuthorizationRequired
from pigeon.server.auth import Authenticator, BearerAuth, principal_of
from pigeon.server.fingerprint import InvalidIdempotencyKey, fingerprint, validate_key
from pigeon.server.idempotency import (
    Claim,
    ClaimDecision,
    ClaimOutcome,
    IdempotencyPolicy,
    IdempotencyStore,
    StoredResponse,
)
from pigeon.server.idempotency_stores import idempotency_store
from pigeon.server.identifiers import MAX_PATH_LENGTH, path_problem
from pigeon.server.intake import WRITE_METHODS
from pigeon.server.limits import DEFAULT_MAX_BODY, checked_limit, read_body
from pigeon.server.messages import bad_json, is_json_media, render_result
from pigeon.server.replay import claim_refusal
from pigeon.server.results import (
    OpResult,
    problem_result,
    store_unavailable,
    stored,
)
from pigeon.storage.base import Database
from pigeon.storage.errors import store_down_errors

# What a wrapped app answers for a request it refused as invalid: nothing ran, nothing kept.
VALIDATION_STATUSES = frozenset({400, 422})
# Per-connection headers (a cookie belongs to the client that got it): sent, never replayed.
_NOT_STORED = {
    b"content-length",
    b"date",
    b"server",
    b"transfer-encoding",
    b"connection",
    b"set-cookie",
}


class IdempotencyMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        db: Database,
        *,
        policy: IdempotencyPolicy | None = None,
        now: Callable[[], float] = time.time,
        authenticate: Authenticator | None = None,
        allow_anonymous: bool | None = None,
        methods: Iterable[str] = WRITE_METHODS,
        paths: Iterable[str] = ("/",),
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        self.app = app
        self.db = db
        self.store: IdempotencyStore = idempotency_store(db, policy, now=now)
        self.authenticate = authenticate or BearerAuth()
        # As create_app: anonymous callers only with the stand-in, unless told otherwise.
        self.allow_anonymous = authenticate is None if allow_anonymous is None else allow_anonymous
        self.methods = frozenset(m.upper() for m in methods)
        self.paths = tuple(paths)
        # The whole body is read (and kept) before the claim: bounded, as the intake's are.
        self.max_body = checked_limit("max_body", max_body)

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
            principal = principal_of(
                self.authenticate, request, allow_anonymous=self.allow_anonymous
            )
            if principal is None:
                raise AuthorizationRequired("credentials are required", status=401)
            key = validate_key(request.headers.getlist(IDEMPOTENCY_KEY))
        except AuthorizationRequired as exc:
            result = problem_result(exc.status or 401, "unauthorized", "Unauthorized", str(exc))
            await render_result(result)(scope, receive, send)
            return
        except InvalidIdempotencyKey as exc:
            result = problem_result(400, "bad-idempotency-key", "Bad request", str(exc))
            await render_result(result)(scope, receive, send)
            return
        raw = await read_body(request, self.max_body, "a request")
        if isinstance(raw, OpResult):  # 413: nothing claimed, the app never sees it
            await render_result(raw)(scope, receive, send)
            return
        refused = _refused_target(scope)
        if refused is not None:
            await render_result(refused)(scope, receive, send)
            return
        body = await run_in_threadpool(_fingerprinted_body, raw)
        if isinstance(body, JsonRefused):
            if is_json_media(request.headers.get("content-type", "")):
                # Declared JSON that the strict decoder refuses: the wrapped app's own
                # decoder may read it otherwise (the last of two equal keys, NaN), so it
                # is refused here, before the claim, as the intake refuses it.
                await render_result(bad_json("the request body", body))(scope, receive, send)
                return
            body = {"raw": base64.b64encode(raw).decode("ascii")}  # not JSON: its bytes
        try:
            decision = await run_in_threadpool(self._claim, principal, key, scope, body)
        except store_down_errors() as exc:
            await render_result(store_unavailable(exc))(scope, receive, send)
            return
        if decision.claim is None:
            await self._refuse(decision, key, scope, receive, send)
            return
        await self._run(decision.claim, raw, scope, send)

    def _claim(self, principal: str, key: str, scope: Scope, body: Any) -> ClaimDecision:
        # The query is part of the request the wrapped app sees (unlike the intake's
        # handlers, which get only the path): the same key with another query is another
        # request, 422, not a replay of the first one's answer.
        target = scope["path"]
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        with self.store.transaction() as tx:
            return self.store.claim(
                tx,
                principal=principal,
                key=key,
                fingerprint=fingerprint(scope["method"], target, body),
                method=scope["method"],
                path=target,
                operation_id=key,
            )

    async def _run(self, claim: Claim, raw: bytes, scope: Scope, send: Send) -> None:
        start: Message = {}
        chunks: list[bytes] = []
        delivered = False

        async def replay_body() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": raw, "more_body": False}
            # Nothing more to read, and no disconnect to tell of: the answer to a keyed
            # write is stored and replayed, so the app must finish it whole whether or not
            # this client stays to read it (it gets it on its retry). An invented
            # disconnect made Starlette's StreamingResponse, which listens for one, cancel
            # its stream unsent, and the empty body was stored as the key's answer.
            await asyncio.Event().wait()  # never set: only the app's cancelling ends it
            raise AssertionError("unreachable")

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        keeper = asyncio.create_task(self._keep(claim))
        try:
            await self.app(scope, replay_body, capture)
        except BaseException:
            await run_in_threadpool(self._release, claim)
            raise
        finally:
            keeper.cancel()
        status = int(start.get("status", 500))
        headers: list[tuple[bytes, bytes]] = list(start.get("headers", []))
        body = b"".join(chunks)
        # 5xx, a "not now" 4xx the client will send again, or the app's own 400 / 422: a
        # request it found invalid did not start executing (Stripe's rule), so the
        # corrected request must run under the same key instead of meeting "reused".
        if not stored(status) or status in VALIDATION_STATUSES:
            await run_in_threadpool(self._release, claim)
        else:
            response = _stored(status, headers, body)
            with contextlib.suppress(*store_down_errors()):
                # If this fails the claim stays in progress until lock_timeout: see above.
                await run_in_threadpool(self._complete, claim, response)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _keep(self, claim: Claim) -> None:
        """Renew the claim every third of the lock timeout while the app runs: a request
        slower than the timeout must not be taken over and run a second time while its
        process is alive. (A dead process stops renewing: that is what the timeout is for.)
        """
        every = self.store.policy.lock_timeout / 3
        while True:
            await asyncio.sleep(every)
            with contextlib.suppress(*store_down_errors()):
                await run_in_threadpool(self._renew, claim)

    def _renew(self, claim: Claim) -> None:
        with self.store.transaction() as tx:
            self.store.renew(tx, claim)

    def _release(self, claim: Claim) -> None:
        with contextlib.suppress(*store_down_errors()), self.store.transaction() as tx:
            self.store.release(tx, claim)

    def _complete(self, claim: Claim, stored: StoredResponse) -> None:
        with self.store.transaction() as tx:
            self.store.complete(tx, claim, stored)

    async def _refuse(
        self, decision: ClaimDecision, key: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        if decision.outcome is ClaimOutcome.REPLAY and decision.response is not None:
            kept = decision.response
            body = (
                base64.b64decode(kept.body)
                if kept.body_format == "base64"
                else kept.body.encode("utf-8")
            )
            headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in kept.headers]
            headers += [
                (b"content-length", str(len(body)).encode()),
                (REPLAYED.lower().encode(), b"true"),
            ]
            await send({"type": "http.response.start", "status": kept.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        # "Already applied", "in progress" and "reused" are answered as the intake answers
        # them (a refused operation stays refused after its response is purged).
        await render_result(claim_refusal(decision, key))(scope, receive, send)


# The request target (path and query) is stored with the claim: bounded, and text.
MAX_TARGET_LENGTH = 2 * MAX_PATH_LENGTH


def _refused_target(scope: Scope) -> OpResult | None:
    path, query = scope["path"], scope.get("query_string", b"")
    if len(path) + len(query) > MAX_TARGET_LENGTH:
        detail = f"the request's path and query have more than {MAX_TARGET_LENGTH} characters"
    else:  # the rule of create_app's routes (a %00 or %0A decoded into the path, ...)
        problem = path_problem(path, scope.get("raw_path"))
        if problem is None:
            return None
        detail = problem
    return problem_result(400, "bad-path", "Bad request", detail)


def _fingerprinted_body(raw: bytes) -> Any:
    """The body as the fingerprint sees it: its strict JSON value (None when empty), or
    the refusal, returned without its traceback (whose frames hold the body's text)."""
    try:
        return strictjson.loads(raw) if raw.strip() else None
    except JsonRefused as exc:
        return exc.with_traceback(None)


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

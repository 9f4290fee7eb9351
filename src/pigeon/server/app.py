"""The ASGI application around an ``Intake``: single-operation routes, the batch route,
the health probe and the OpenAPI contract.

``create_app(intake, routes=[...])`` adds the application's read routes (no key needed)
beside the operations registered on the intake.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from pigeon.core.wire import BATCH_PATH, HEALTH_PATH
from pigeon.exceptions import ConfigurationError
from pigeon.server import access, memory, on_loop
from pigeon.server.access import AccessPolicy, OperatorCheck
from pigeon.server.auth import Authenticator
from pigeon.server.auth_options import AuthOptions
from pigeon.server.batch_wire import read_batch, results_json, sent_in_slices
from pigeon.server.grouping import (
    RequestGroups,
    Writer,
    finish_after_loop,
    finished,
    turn_on_loop,
)
from pigeon.server.intake import Intake, OperationRequest
from pigeon.server.messages import (
    Unhandled,
    read_json_buffer,
    read_request,
    render_result,
    route_problem,
)
from pigeon.server.openapi import OPENAPI_PATH, build_openapi
from pigeon.server.options import BodyLimits, ServerOptions
from pigeon.server.pathcheck import PathCheck
from pigeon.server.results import OpResult, store_unavailable
from pigeon.storage.errors import store_down_errors

log = logging.getLogger(__name__)


def create_app(
    intake: Intake,
    options: ServerOptions | None = None,
    *,
    routes: Sequence[BaseRoute] = (),
    authenticate: Authenticator | None = None,
    operator: OperatorCheck | None = None,
    purge_interval: float | None = 3600.0,
    title: str = "pigeon intake",
    group_commit: bool | None = None,
) -> Starlette:
    """``options``: the server's settings (`pigeon.server.options.ServerOptions`; what
    ``pigeon serve`` hands an application's factory): here its body limits and who may
    call what (``options.auth``); the intake must have been made with ``options.intake``.
    ``routes``: the application's own routes, each declaring who may call it
    (`pigeon.server.access`: ``user(Route(...))``, ``operator(...)``, ...); a route that
    declares nothing is refused here. The intake's operations and the batch are ``user``
    routes, the health probe and the OpenAPI document ``public``.
    ``authenticate``: names the user principal (`pigeon.server.auth`), in place of the
    authenticator ``options.auth`` names; by default the ``BearerAuth`` stand-in, which
    verifies nothing (tests and demos only). ``operator``: tells the operator credential,
    in place of ``options.auth.operator_token``; without either, nobody reaches the
    ``operator`` routes. Requests without credentials act as the one user ``anonymous``
    when ``options.auth.allow_anonymous`` says so; by default only with the stand-in.
    ``group_commit``: single-operation requests that arrive together share one
    transaction (`pigeon.server.grouping`). By default on for SQLite, whose one writer
    serialises them anyway, and off for PostgreSQL, where they run side by side."""
    if options is None:
        options = ServerOptions(intake=intake.options)
    elif options.intake != intake.options:
        raise ConfigurationError(
            "the intake was made with other IntakeOptions than options.intake: make it "
            "with Intake(db, options.intake)",
            field="intake",
        )
    limits = options.limits
    policy = _access(options.auth, authenticate, operator)
    grouped, writer = _writers(intake, group_commit)
    spec = build_openapi(intake, title=title, extra_routes=routes, limits=limits)
    endpoints = _Endpoints(intake, grouped, writer, spec, limits)
    all_routes = [*_intake_routes(intake, endpoints), *routes]
    # The one place that decides: every route, mounted ones included, bound to the policy;
    # a route without a declared rule is refused here (ConfigurationError).
    access.bind(all_routes, policy)
    app = Starlette(
        routes=all_routes,
        lifespan=_lifespan(intake, purge_interval),
        exception_handlers={HTTPException: route_problem},
        middleware=[Middleware(Unhandled), Middleware(PathCheck)],  # an error: an id, always
    )
    # No "/metrics/" -> "/metrics" redirect: it would confirm a route before its rule.
    app.router.redirect_slashes = False
    app.state.access = policy
    app.state.intake = intake
    app.state.group_commit = grouped
    app.state.options = options
    return app


def _writers(
    intake: Intake, group_commit: bool | None
) -> tuple[RequestGroups | None, Writer | None]:
    """Group commit for single requests (by default with one writer), and the thread the
    batches take turns on (with one writer): a store with one writer takes its batches,
    and its groups, on one thread of its own (`pigeon.server.grouping`). Not a batch that
    may wait there for a duplicate's original (``in_progress_wait``), which could be
    queued behind it for that same thread."""
    one = intake.store.single_writer
    writer = Writer() if one else None
    if group_commit is None:
        group_commit = one
    grouped = RequestGroups(intake, writer=writer) if group_commit else None
    return grouped, (None if intake.options.in_progress_wait else writer)


def _access(
    auth: AuthOptions, authenticate: Authenticator | None, operator: OperatorCheck | None
) -> AccessPolicy:
    """The access policy of ``auth``, or of the authenticator and operator check given."""
    if authenticate is not None and auth.auth != "demo":
        raise ConfigurationError(
            "an authenticator was given and options.auth names another: give one", field="auth"
        )
    if operator is not None and auth.operator_token:
        raise ConfigurationError(
            "an operator check was given and options.auth names an operator token: give one",
            field="operator_token",
        )
    anonymous = auth.allow_anonymous
    if anonymous is None:  # the stand-in verifies nothing anyway
        anonymous = authenticate is None and auth.auth == "demo"
    return AccessPolicy(
        authenticate or auth.authenticator(),
        operator=operator or auth.operator(),
        allow_anonymous=anonymous,
    )


# Batches one serving process applies at once without a writer thread (PostgreSQL, or
# in_progress_wait set): one decodes and writes while the other waits on the database.
# More only pass the one interpreter's lock around: two processes on PostgreSQL, batches
# of 100 over 8 connections, read 17,126 against 14,911 ops/s unbounded (six alternated
# runs), 15,328 by 3.
BATCHES_AT_ONCE = 2


class _Endpoints:
    """The intake's routes: one operation, a batch, the health probe, the OpenAPI document."""

    def __init__(
        self,
        intake: Intake,
        grouped: RequestGroups | None,
        writer: Writer | None,
        spec: dict[str, Any],
        limits: BodyLimits,
    ) -> None:
        self.intake = intake
        self.grouped = grouped
        self.writer = writer
        # The thread(s) batches are applied on: the writer's, or without one so many at once.
        self.turns = writer or Writer(BATCHES_AT_ONCE, "pigeon-batch")
        self.spec = spec
        self.max_body = limits.max_body
        self.max_batch_body = limits.max_batch_body

    async def operation(self, request: Request) -> Response:
        principal = access.principal(request)
        intake = self.intake
        hooks = intake.options.test_hooks
        read = await read_request(request, max_body=self.max_body, test_hooks=hooks)
        if isinstance(read, OpResult):
            return render_result(read)
        size, parsed = len(read[0]), read[1]
        del read
        if self.grouped is not None:
            return render_result(await self.grouped.execute(principal, parsed, size=size))
        return render_result(await run_in_threadpool(intake.execute, principal, parsed))

    async def batch(self, request: Request) -> Response:
        principal = access.principal(request)
        raw = await read_json_buffer(request, self.max_batch_body, "a batch request")
        if isinstance(raw, OpResult):
            return render_result(raw)
        # Up to 16 MiB: the only reference is handed over (the holder is emptied in the
        # worker thread), so the bytes go as soon as they are text, and the decoded
        # operations as soon as they are applied, instead of living as long as this frame.
        held: list[Any] = [raw]
        del raw
        # Decoding, checking the entries, applying them and writing the answer (up to
        # 16 MiB of it), all in ONE hand-off to a worker thread: none of it may hold up the
        # event loop, and each hand-off costs a wake-up of both threads. With one writer,
        # on its thread (batches wait their turn here, not in threads), unless the batch is
        # small and short enough to be applied on the loop (`pigeon.server.on_loop`).
        size = len(held[0])
        if self.writer is None or not (self.writer.idle and on_loop.small(size)):
            return await self.turns.run(functools.partial(self.answer_batch, principal, held))
        try:
            refused = self._decode(held)
            if refused is not None:
                return refused
            answered = await self._on_loop(principal, *held[0])
            if answered is not None:
                return answered
            return await self.writer.run(functools.partial(self._applied, principal, held))
        finally:
            memory.give_back(size)

    async def _on_loop(
        self, principal: str, ids: list[Any], ops: list[OperationRequest | OpResult]
    ) -> Response | None:
        """The answer to a small decoded batch committed here on the event loop, if it
        commits once, is sure to be short and nothing else writes (`turn_on_loop`); None
        to send it to the writer thread. (Each chunk of a chunked batch has its commit
        heard as it commits: on the writer.)"""
        assert self.writer is not None
        if not self.intake.commits_once(len(ops)):
            return None
        with self.intake.admitted_batch(principal, ops) as admitted:
            with turn_on_loop(self.writer, self.intake, admitted) as ours:
                if not ours:
                    return None
                try:
                    results = self.intake.commit_batch(principal, admitted)
                except store_down_errors() as exc:
                    return render_result(store_unavailable(exc))
            finishing = finish_after_loop(self.writer, self.intake, results)
            if await finished(finishing):
                raise asyncio.CancelledError
            return sent_in_slices(results_json(ids, finishing.result()))

    def answer_batch(self, principal: str, held: list[Any]) -> Response:
        size = len(held[0])
        try:
            return self._decode(held) or self._applied(principal, held)
        finally:
            memory.give_back(size)  # once all that the batch decoded is let go of

    @staticmethod
    def _decode(held: list[Any]) -> Response | None:
        """The batch whose body is ``held``'s one item decoded in its place, or the
        answer refusing the whole body."""
        batch = read_batch(held)
        if isinstance(batch, OpResult):
            return render_result(batch)
        held.append(batch)
        return None

    def _applied(self, principal: str, held: list[Any]) -> Response:
        """The answer to the decoded batch that is ``held``'s one item (its only
        reference: the operations go once applied, before the answer is written)."""
        ids, ops = held.pop()
        try:
            results = self.intake.execute_batch(principal, ops)
        except store_down_errors() as exc:
            return render_result(store_unavailable(exc))
        del ops
        return sent_in_slices(results_json(ids, results))

    async def health(self, request: Request) -> Response:
        # Deliberately touches no database: connectivity monitors probe it often.
        return JSONResponse({"status": "ok"})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self.spec)


def _intake_routes(intake: Intake, endpoints: _Endpoints) -> list[BaseRoute]:
    """The batch, the probe, the document (each with its access rule) and one route per
    path of the intake's operations."""
    by_path: dict[str, list[str]] = {}
    for route in intake.routes:
        by_path.setdefault(route.template, []).append(route.method)
    return [
        access.user(Route(BATCH_PATH, endpoints.batch, methods=["POST"])),
        access.public(Route(HEALTH_PATH, endpoints.health, methods=["GET"])),
        access.public(Route(OPENAPI_PATH, endpoints.openapi, methods=["GET"])),
        *(
            access.user(Route(p, endpoints.operation, methods=methods))
            for p, methods in by_path.items()
        ),
    ]


def _lifespan(
    intake: Intake, purge_interval: float | None
) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """Purges expired claims every ``purge_interval`` seconds while the app runs."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = None
        if purge_interval:
            task = asyncio.create_task(_purge_forever(intake, purge_interval))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    return lifespan


async def _purge_forever(intake: Intake, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            responses, claims = await run_in_threadpool(intake.purge)
            log.info("purged %d stored responses and %d expired claims", responses, claims)
        except store_down_errors() as exc:
            log.warning("purge skipped, store unavailable: %s", exc)
        except Exception:
            # Any other failure of one round: logged, and the next round runs. Leaving the
            # loop ended purging until a restart, and the claims table grew without bound.
            log.exception("purge round failed; the next one runs in %s s", interval)

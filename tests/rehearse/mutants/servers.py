"""Broken variants of the reference app's ``POST /answers``, each a factory for
``pigeon serve --app`` (and so for ``pigeon rehearse --app``), each with one fault a
scenario must find and name; ``answers`` is the route as the reference app writes it.

Their hooks tell the rehearsal what it cannot see for itself: ``own_db_hooks`` counts the
rows a variant keeps in a database of its own (``MUTANT_DB``), ``bypass_hooks`` makes the
requests of a route the OpenAPI document does not list."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pigeon.jobs import records
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import enqueue
from pigeon.jobs.publishers import open_publisher
from pigeon.jobs.publishers.messages import Message
from pigeon.reference.answers import ANSWER_SCHEMA, accept_answer
from pigeon.reference.jobs import app as reference_jobs
from pigeon.rehearse import RehearsalHooks
from pigeon.server import Intake, IntakeContext, ServerOptions, access, create_app
from pigeon.server.intake import HandlerResult
from pigeon.storage.base import Database

MUTANT_DB = "MUTANT_DB"  # the database of its own a variant writes to
Handler = Callable[[IntakeContext], HandlerResult]


def _serve(
    options: ServerOptions,
    handler: Handler,
    *,
    schema: dict[str, Any] = ANSWER_SCHEMA,
    after_commit: Callable[[list[str]], None] | None = None,
) -> Starlette:
    intake = Intake(options.open_db(), options.intake, after_commit=after_commit)
    intake.add_operation("POST", "/answers", handler, request_schema=schema)
    return create_app(intake, options, title="mutant answers")


def answers(options: ServerOptions) -> Starlette:
    """The route as the reference app has it: every scenario passes."""
    return _serve(options, lambda ctx: accept_answer(ctx, reference_jobs))


# -- crash-before-commit: an effect written outside pigeon's transaction ------------------


def _own_db() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ[MUTANT_DB], timeout=30, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS answers_seen (principal TEXT, key TEXT, at REAL)")
    return conn


def _count_own() -> int:
    conn = _own_db()
    try:
        return int(conn.execute("SELECT count(*) FROM answers_seen").fetchone()[0])
    finally:
        conn.close()


def outside_tx(options: ServerOptions) -> Starlette:
    """Writes its own row about each answer in a database of its own, committed at once,
    then accepts the answer in pigeon's transaction: a crash between the two leaves the
    row, and the retry writes another."""

    def accept(ctx: IntakeContext) -> HandlerResult:
        conn = _own_db()
        try:
            conn.execute(
                "INSERT INTO answers_seen VALUES (?, ?, ?)",
                (ctx.principal, ctx.idempotency_key, time.time()),
            )
        finally:
            conn.close()
        return accept_answer(ctx, reference_jobs)

    return _serve(options, accept)


own_db_hooks = RehearsalHooks(counters={"answers_seen (own database)": _count_own})


# -- crash-after-commit: the job enqueued after the commit ------------------------------


def enqueue_after_commit(options: ServerOptions) -> Starlette:
    """Accepts the answer as a record with no obligation and enqueues its grading job
    once the intake has committed (its ``after_commit``): a crash in between loses it."""
    db = options.open_db()
    waiting: dict[str, str] = {}
    lock = threading.Lock()

    def accept(ctx: IntakeContext) -> HandlerResult:
        data = {k: ctx.body[k] for k in ("question", "answer") if k in ctx.body}
        rid = records.accept(ctx.tx, kind="answer", data=data, principal=ctx.principal)
        with lock:
            waiting[ctx.idempotency_key] = rid
        return 202, {"status": "received", "record": rid, "pending": []}

    def after(keys: list[str]) -> None:
        with lock:
            due = [waiting.pop(k) for k in keys if k in waiting]
        for rid in due:
            with db.transaction() as tx:
                enqueue(tx, JobSpec("grading", "grade", {"answer_id": rid}), app=reference_jobs)

    return _serve(options, accept, after_commit=after)


# -- duplicate-concurrent: a write route outside the intake -----------------------------


def bypass_intake(options: ServerOptions) -> Starlette:
    """``POST /answers`` as a plain route of its own, outside the intake: no key is
    claimed, so every copy of a request is accepted again."""
    db = options.open_db()
    intake = Intake(db, options.intake)

    async def post(request: Request) -> JSONResponse:
        body = await request.json()
        principal = access.principal(request)
        rid = await run_in_threadpool(_accept_alone, db, body, principal)
        return JSONResponse({"status": "received", "record": rid}, status_code=202)

    routes = [access.user(Route("/answers", post, methods=["POST"]))]
    return create_app(intake, options, routes=routes, title="mutant answers")


def _accept_alone(db: Database, body: dict[str, Any], principal: str) -> str:
    with db.transaction() as tx:
        return records.accept(tx, kind="answer", data=body, principal=principal)


bypass_hooks = RehearsalHooks(
    requests={"POST /answers": lambda n, rng: ANSWER_SCHEMA["examples"][n % 2]}
)


# -- bad-payload: a schema looser than the handler --------------------------------------

LOOSE: dict[str, Any] = {
    "type": "object",
    "required": ["question", "answer"],
    "properties": {"question": {"type": "string"}, "answer": {}},
    "examples": ANSWER_SCHEMA["examples"],
}


def loose_schema(options: ServerOptions) -> Starlette:
    """Publishes and enforces a schema that lets any ``answer`` through, and then trusts it
    to be text: an answer that is a number fails with a 500."""

    def accept(ctx: IntakeContext) -> HandlerResult:
        ctx.body["answer"].strip()  # the bug: not every answer the schema lets in is text
        return accept_answer(ctx, reference_jobs)

    return _serve(options, accept, schema=LOOSE)


# -- relay-down: the broker called in the request ---------------------------------------


def publish_in_request(options: ServerOptions) -> Starlette:
    """Publishes each answer to the broker itself, in the request, instead of through the
    outbox: while the broker is away, every answer fails."""
    assert options.relay_to is not None, "rehearse with --relay-to"
    publisher = open_publisher(options.relay_to)

    def accept(ctx: IntakeContext) -> HandlerResult:
        status, body, headers = accept_answer(ctx, reference_jobs)
        message = Message(
            str(uuid.uuid4()), "answers.received", {"record": body["record"]}, time.time()
        )
        publisher.publish(message)  # the bug: the broker is part of every request
        return status, body, headers

    return _serve(options, accept)

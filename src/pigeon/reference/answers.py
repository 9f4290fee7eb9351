"""The reference app's accountable resource: answers that must be graded and acknowledged.

``POST /answers`` commits, in the intake's one transaction, the idempotency claim, the
answer as a record, its obligations (``grading``, and ``notify`` when the answer names
someone to tell), their jobs, and an outbox message announcing the answer. Only then does
it answer ``202 {"status": "received", "pending": [...]}``: a fast "received", never an
invented grade. ``GET /answers/{id}`` (its author's, or an operator's) shows the answer,
its status and pending obligations, and its grade once a worker has graded it (the grading
task's effect result); ``GET /pigeon/v1/records/{id}`` shows the record behind it.
A replay of the POST never accepts again: it answers the stored 202 and ``Location``
with ``Idempotent-Replayed: true`` and a body of the record's current, approved state,
e.g. ``{"status": "completed", "record": id, "pending": []}`` once the workers are done
(see ``pigeon.server.replay`` for why the status stays 202).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from pigeon.core.wire import PROBLEM_JSON
from pigeon.exceptions import NotFound, ValidationError
from pigeon.jobs import effects, outbox, records
from pigeon.jobs.app import App
from pigeon.jobs.job import JobSpec
from pigeon.reference.jobs import GRADE_SCOPE, grade_key
from pigeon.server import access
from pigeon.server.intake import HandlerResult, Intake, IntakeContext
from pigeon.server.problems import problem
from pigeon.server.records import RECORDS_PATH
from pigeon.server.replay import ReplayInfo
from pigeon.storage.base import Database, Tx

ANSWERS_PATH = "/answers"
ANSWER_PATH = "/answers/{record_id}"
ANSWER_TOPIC = "answers.received"


def accept_answer(ctx: IntakeContext, jobs: App | None = None) -> HandlerResult:
    """``jobs``: the job app whose workers run the obligations; with it, each job is
    checked against its task (registered, payload binds) before anything is accepted,
    and takes the task's retry policy (``@app.task(max_attempts=...)``)."""
    body = ctx.body
    validate_answer(body, ctx.path_params)  # declared too: see add_answers
    data = {k: body[k] for k in ("question", "answer", "expected", "notify") if k in body}
    data["principal"] = ctx.principal
    record_id = str(uuid.uuid4())
    # The jobs carry the record's id, not the answer or the address: their tasks re-read
    # those from the record, and re-check its author's access, when they run.
    ids = {"answer_id": record_id}
    obligations = {"grading": JobSpec("grading", "grade", ids)}
    if body.get("notify"):
        obligations["notify"] = JobSpec("notify", "send", ids)
    records.accept(
        ctx.tx,
        kind="answer",
        data=data,
        obligations=obligations,
        record_id=record_id,
        now=ctx.now,
        app=jobs,
        principal=ctx.principal,
    )
    announce = {"record": record_id, "question": body["question"]}
    outbox.add(ctx.tx, ANSWER_TOPIC, announce, now=ctx.now)
    location = RECORDS_PATH.format(record_id=record_id)
    reply = {"status": "received", "record": record_id, "pending": sorted(obligations)}
    return 202, reply, {"Location": location}


def current_answer(tx: Tx, stored: Any, info: ReplayInfo) -> Any:
    """A replay's body: the acceptance as it stands now (status and pending obligations)."""
    record_id = stored.get("record") if isinstance(stored, dict) else None
    if not isinstance(record_id, str):
        return None  # a stored refusal (422): nothing was recorded, it replays verbatim
    try:
        view = records.view(tx, record_id)
    except NotFound:
        return None
    return {"status": view["status"], "record": record_id, "pending": view["pending"]}


def validate_answer(body: Any, path_params: Mapping[str, Any]) -> None:
    """``ANSWER_SCHEMA`` in words, for a handler registered without the declaration: a
    refusal raised from the handler frees the key all the same."""
    if not isinstance(body, dict):
        raise _invalid("the body must be a JSON object")
    for field in ("question", "answer"):
        if not isinstance(body.get(field), str) or not body[field].strip():
            raise _invalid(f"{field!r} must be a non-empty string")
    for field in ("expected", "notify"):
        if field in body and body[field] is not None and not isinstance(body[field], str):
            raise _invalid(f"{field!r} must be a string when given")


def _invalid(detail: str) -> ValidationError:
    return ValidationError(detail, slug="invalid-answer", status=422)


# A character that is not white space by str.isspace, which validate_answer's strip()
# uses: "\\S" means other characters in Python's, Rust's and ECMA-262's expressions.
_NOT_SPACE = (
    "[^\\u0009-\\u000d\\u001c-\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a"
    "\\u2028\\u2029\\u202f\\u205f\\u3000]"
)
_TEXT = {"type": "string", "pattern": _NOT_SPACE}
_OPTIONAL_TEXT = {"type": ["string", "null"]}
# What `validate_answer` checks, enforced before the claim and published in the OpenAPI.
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["question", "answer"],
    "additionalProperties": False,
    "properties": {
        "question": _TEXT,
        "answer": _TEXT,
        "expected": _OPTIONAL_TEXT,
        "notify": _OPTIONAL_TEXT,
    },
    # Published with the schema: what a client (and `pigeon rehearse`) may send as is.
    "examples": [
        {"question": "2 + 2?", "answer": "4", "expected": "4", "notify": "ada@example.org"},
        {"question": "The capital of France?", "answer": "Paris", "expected": "Paris"},
    ],
}


def add_answers(intake: Intake, jobs: App | None = None) -> None:
    """Register ``POST /answers``; ``jobs`` as in `accept_answer`."""
    handler = functools.partial(accept_answer, jobs=jobs)
    intake.add_operation(
        "POST",
        ANSWERS_PATH,
        handler,
        on_replay=current_answer,
        request_schema=ANSWER_SCHEMA,
        validate=validate_answer,
    )


def grade_of(tx: Tx, answer_id: str) -> int | None:
    """The answer's score once the grading task has run (its effect's stored result,
    committed with the claim that makes it run once), else None."""
    result = effects.effect_result(tx, GRADE_SCOPE, grade_key(answer_id))
    score = result.get("score") if isinstance(result, dict) else None
    return score if isinstance(score, int) else None


def read_answer(db: Database, answer_id: str, *, principal: str | None = None) -> dict[str, Any]:
    """An answer as its author sees it: what was asked and answered, where its obligations
    stand, and its grade (None until graded). ``principal``: as in ``records.get`` (another
    principal's answer, or a record that is no answer, is NotFound)."""
    with db.reading() as tx:
        view = records.view(tx, answer_id, principal=principal)
        if view["kind"] != "answer":
            raise NotFound(f"no answer {answer_id!r}")
        grade = grade_of(tx, answer_id)
    data = view["data"]
    return {
        "id": answer_id,
        "question": data.get("question"),
        "answer": data.get("answer"),
        "status": view["status"],
        "pending": view["pending"],
        "graded": grade is not None,
        "grade": grade,
        "record": RECORDS_PATH.format(record_id=answer_id),
    }


def answers_routes(db: Database) -> list[BaseRoute]:
    """``GET /answers/{id}``: an ``owner`` route (`pigeon.server.access`), like the record."""

    async def get_answer(request: Request) -> JSONResponse:
        answer_id = request.path_params["record_id"]
        caller = access.caller(request)
        owner = None if caller.operator else caller.principal
        try:
            # In a worker thread: a read waiting on the store must not hold the event loop.
            body = await run_in_threadpool(read_answer, db, answer_id, principal=owner)
        except NotFound as exc:
            refusal = problem(404, "no-such-answer", "Not found", str(exc))
            return JSONResponse(refusal, status_code=404, media_type=PROBLEM_JSON)
        return JSONResponse(body)

    return [access.owner(Route(ANSWER_PATH, get_answer, methods=["GET"], name="answer"))]

"""The reference app's accountable resource: answers that must be graded and acknowledged.

``POST /answers`` commits, in the intake's one transaction, the idempotency claim, the
answer as a record, its obligations (``grading``, and ``notify`` when the answer names
someone to tell), their jobs, and an outbox message announcing the answer. Only then does
it answer ``202 {"status": "received", "pending": [...]}``: a fast "received", never an
invented grade. The grade appears in the record (``GET /pigeon/v1/records/{id}``) when a
worker has done it. A replay of the POST never accepts again: it answers the stored 202
and ``Location`` with ``Idempotent-Replayed: true`` and a body of the record's current,
approved state, e.g. ``{"status": "completed", "record": id, "pending": []}`` once the
workers are done (see ``pigeon.server.replay`` for why the status stays 202).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from typing import Any

from pigeon.exceptions import NotFound, ValidationError
from pigeon.jobs import outbox, records
from pigeon.jobs.app import App
from pigeon.jobs.job import JobSpec
from pigeon.server.intake import HandlerResult, Intake, IntakeContext
from pigeon.server.records import RECORDS_PATH
from pigeon.server.replay import ReplayInfo
from pigeon.storage.base import Tx

ANSWERS_PATH = "/answers"
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


_TEXT = {"type": "string", "minLength": 1, "pattern": r"\S"}
_OPTIONAL_TEXT = {"type": ["string", "null"]}
# What `validate_answer` checks, enforced before the claim and published in the OpenAPI.
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["question", "answer"],
    "properties": {
        "question": _TEXT,
        "answer": _TEXT,
        "expected": _OPTIONAL_TEXT,
        "notify": _OPTIONAL_TEXT,
    },
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

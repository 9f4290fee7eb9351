"""The reference jobs, next version: grading takes ``{"answer": {"id": ...}}`` (version 2)
and upcasts the version-1 jobs the reference intake still makes (``{"answer_id": ...}``).
``broken`` is the same deploy gone wrong: the parameter renamed, the version not raised
and no upcaster, so every old job fails for good once it runs on the new code."""

from __future__ import annotations

from typing import Any

from pigeon.jobs import access, records
from pigeon.jobs.app import App
from pigeon.jobs.context import JobContext
from pigeon.jobs.job import Job
from pigeon.reference.jobs import FIELDS, GRADE_SCOPE, author_has_access, grade_key, score
from pigeon.storage.base import Tx


def _queues(app: App) -> App:
    app.queue("grading", max_workers=8, owner="grading-team")
    app.queue("notify", max_workers=8, owner="comms-team")
    return app


def answer_v2(payload: dict[str, Any]) -> dict[str, Any]:
    return {"answer": {"id": payload["answer_id"]}}


def author_active_v2(tx: Tx, job: Job) -> str | None:
    row = tx.fetchone("rec_get", {"id": str(job.payload["answer"]["id"])})
    if row is None or row["principal"] is None:
        return None
    reason = access.revoked(tx, row["principal"])
    return None if reason is None else f"revoked ({reason})"


def _grade(ctx: JobContext, answer_id: str) -> None:
    def mutation(tx: Tx) -> dict[str, Any]:
        data = records.view(tx, answer_id)["data"]
        return {"answer_id": answer_id, "score": score(data["answer"], data.get("expected"))}

    ctx.effect(grade_key(answer_id), mutation, scope=GRADE_SCOPE)


def _send(ctx: JobContext, answer_id: str) -> None:
    ctx.effect(f"notify:{answer_id}", lambda tx: {"answer_id": answer_id, "notified": True})


app = _queues(App(default_owner="operations"))


@app.task(
    queue="grading", name="grade", context=True, fields=("answer",), access=author_active_v2,
    version=2, upcast={1: answer_v2},
)  # fmt: skip
def grade_v2(ctx: JobContext, answer: dict[str, str]) -> None:
    _grade(ctx, answer["id"])


@app.task(queue="notify", name="send", context=True, fields=FIELDS, access=author_has_access)
def send_v1(ctx: JobContext, answer_id: str) -> None:
    _send(ctx, answer_id)


broken = _queues(App(default_owner="operations"))


@broken.task(queue="grading", name="grade", context=True, fields=("submission_id",))
def grade_renamed(ctx: JobContext, submission_id: str) -> None:
    _grade(ctx, submission_id)


@broken.task(queue="notify", name="send", context=True, fields=FIELDS, access=author_has_access)
def send_same(ctx: JobContext, answer_id: str) -> None:
    _send(ctx, answer_id)

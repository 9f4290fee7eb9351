"""The reference jobs with an access re-check that never refuses: it reads a revocation
list nobody writes to, so a revoked principal's jobs run (``revoked-access`` must fail)."""

from __future__ import annotations

from pigeon.jobs.app import App
from pigeon.jobs.context import JobContext
from pigeon.jobs.job import Job
from pigeon.reference.jobs import FIELDS, GRADE_SCOPE, grade_key
from pigeon.storage.base import Tx

app = App(default_owner="operations")
app.queue("grading", max_workers=8, owner="grading-team")
app.queue("notify", max_workers=8, owner="comms-team")


def looks_at_the_wrong_list(tx: Tx, job: Job) -> str | None:
    return None  # the bug: the principal is never looked up


@app.task(queue="grading", context=True, fields=FIELDS, access=looks_at_the_wrong_list)
def grade(ctx: JobContext, answer_id: str) -> None:
    ctx.effect(
        grade_key(answer_id), lambda tx: {"answer_id": answer_id, "score": 0}, scope=GRADE_SCOPE
    )


@app.task(queue="notify", context=True, fields=FIELDS, access=looks_at_the_wrong_list)
def send(ctx: JobContext, answer_id: str) -> None:
    ctx.effect(f"notify:{answer_id}", lambda tx: {"answer_id": answer_id, "notified": True})

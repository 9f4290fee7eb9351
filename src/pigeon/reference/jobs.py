"""The built-in demo app the worker runs when no ``--app`` is given: answers are graded
and their authors notified, each effect under the claim helper so a re-run never grades
or notifies twice.

Its jobs carry the answer's id and nothing else (``fields``): the answer, the expected
answer and the address to notify stay in the record, where each task re-reads them when it
runs, so no copy of them waits in the queue, its retries or the failed store. Before the
work, each task re-checks that the answer's author still has access (``access``): a job of
a revoked principal fails for good, to its owner (see ``pigeon.jobs.access``)."""

from __future__ import annotations

from typing import Any

from pigeon.jobs import access, records
from pigeon.jobs.app import App
from pigeon.jobs.context import JobContext
from pigeon.jobs.job import Job
from pigeon.jobs.timeouts import Timeouts
from pigeon.storage.base import Tx

app = App(default_owner="operations")
app.queue(
    "grading",
    min_workers=1,
    max_workers=32,
    freshness=60,
    owner="grading-team",
    timeouts=Timeouts(job=30),
)
app.queue(
    "notify",
    min_workers=1,
    max_workers=16,
    freshness=30,
    owner="comms-team",
    timeouts=Timeouts(job=10),
)
FIELDS = ("answer_id",)  # what a job of this app carries: an id
# The grading effect's scope and key: the scope is the task's name, ``ctx.effect``'s
# default, named here so that ``GET /answers/{id}`` reads the grade where it was stored.
GRADE_SCOPE = "grade"


def grade_key(answer_id: str) -> str:
    return f"answer:{answer_id}"


def score(answer: str, expected: str | None) -> int:
    return 100 if expected is not None and answer.strip() == expected.strip() else 0


def answer_data(tx: Tx, answer_id: str) -> dict[str, Any]:
    """The answer as recorded by ``POST /answers`` (question, answer, expected, notify,
    principal): what the tasks read instead of carrying it."""
    data: dict[str, Any] = records.view(tx, answer_id)["data"]
    return data


def author_has_access(tx: Tx, job: Job) -> str | None:
    """The access re-check of every task here: the answer still exists and its author
    (the principal the intake recorded with it) has not been revoked."""
    answer_id = job.payload.get("answer_id")
    row = tx.fetchone("rec_get", {"id": str(answer_id)})
    if row is None:
        return f"answer {answer_id!r} no longer exists"
    principal = row["principal"]  # None: made outside the intake, nobody's to re-check
    reason = access.revoked(tx, principal) if principal is not None else None
    return None if reason is None else f"principal {principal!r} was revoked ({reason})"


@app.task(queue="grading", context=True, fields=FIELDS, access=author_has_access)
def grade(ctx: JobContext, answer_id: str) -> None:
    def mutation(tx: Tx) -> dict[str, Any]:
        answer = answer_data(tx, answer_id)
        return {"answer_id": answer_id, "score": score(answer["answer"], answer.get("expected"))}

    ctx.effect(grade_key(answer_id), mutation, scope=GRADE_SCOPE)


@app.task(queue="notify", context=True, fields=FIELDS, access=author_has_access)
def send(ctx: JobContext, answer_id: str) -> None:
    def mutation(tx: Tx) -> dict[str, Any]:
        # A real app hands answer["notify"] and its message to a mail provider here
        # (ctx.call_provider); the effect's stored result names no address.
        answer = answer_data(tx, answer_id)
        return {"answer_id": answer_id, "notified": bool(answer.get("notify"))}

    ctx.effect(f"notify:{answer_id}", mutation)

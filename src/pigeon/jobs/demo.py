"""The built-in demo app the worker runs when no ``--app`` is given: answers are graded
and their authors notified, each effect under the claim helper so a re-run never grades
or notifies twice."""

from __future__ import annotations

from typing import Any

from pigeon.jobs.app import App
from pigeon.jobs.context import JobContext
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


def score(answer: str, expected: str | None) -> int:
    return 100 if expected is not None and answer.strip() == expected.strip() else 0


@app.task(queue="grading", context=True)
def grade(ctx: JobContext, answer_id: str, answer: str, expected: str | None = None) -> None:
    def mutation(tx: Tx) -> dict[str, Any]:
        return {"answer_id": answer_id, "score": score(answer, expected)}

    ctx.effect(f"answer:{answer_id}", mutation)


@app.task(queue="notify", context=True)
def send(ctx: JobContext, to: str, message: str) -> None:
    ctx.effect(f"notify:{ctx.job.record_id or ctx.job.id}:{to}", lambda tx: {"to": to})

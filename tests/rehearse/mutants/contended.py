"""The reference jobs with a grading task that takes one lock for its whole run (a shared
resource): quick alone, serial under load, so a peak drains far slower than the planner
predicts from normal operation (``peak`` must fail)."""

from __future__ import annotations

import threading
import time

from pigeon.jobs.app import App
from pigeon.jobs.context import JobContext
from pigeon.reference.jobs import FIELDS, GRADE_SCOPE, author_has_access, grade_key

app = App(default_owner="operations")
app.queue("grading", max_workers=8, owner="grading-team")
app.queue("notify", max_workers=8, owner="comms-team")
THE_LOCK = threading.Lock()
HOLD = 0.25  # seconds of work under the lock


@app.task(queue="grading", context=True, fields=FIELDS, access=author_has_access)
def grade(ctx: JobContext, answer_id: str) -> None:
    with THE_LOCK:
        time.sleep(HOLD)
    ctx.effect(
        grade_key(answer_id), lambda tx: {"answer_id": answer_id, "score": 0}, scope=GRADE_SCOPE
    )


@app.task(queue="notify", context=True, fields=FIELDS, access=author_has_access)
def send(ctx: JobContext, answer_id: str) -> None:
    ctx.effect(f"notify:{answer_id}", lambda tx: {"answer_id": answer_id, "notified": True})

"""The job app the multi-node test's worker nodes run (``--app tests.multinode_app:app``).

The same queues and tasks as ``pigeon.reference.jobs`` (the reference app's ``POST /answers``
enqueues ``grading/grade`` and ``notify/send``), with short timeouts so a job leased by a
SIGKILLed node is eligible again within seconds. Each effect appends one outbox row under
a topic naming the job's business key: a job applied twice would show two rows.
"""

from __future__ import annotations

import time
import uuid

from pigeon.exceptions import PermanentError
from pigeon.jobs.app import App
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.context import JobContext
from pigeon.jobs.timeouts import Timeouts
from pigeon.reference.jobs import FIELDS, answer_data, author_has_access
from pigeon.storage.base import Tx

SHORT = Timeouts(job=1.0, external_call=0.5, supervisor=1.5, lease=2.5)
REFUSED = "refuse me"  # an answer the grader refuses for good: lands in the failed store

app = App(default_owner="operations")
app.queue(
    "grading", max_workers=4, owner="grading-team", timeouts=SHORT, backoff=Backoff(0.05, 0.2)
)
app.queue("notify", max_workers=2, owner="comms-team", timeouts=SHORT, backoff=Backoff(0.05, 0.2))


def _mark(tx: Tx, topic: str) -> None:
    tx.execute(
        "outbox_insert",
        {"message_id": uuid.uuid4().hex, "topic": topic, "payload": "{}", "now": time.time()},
    )


@app.task(queue="grading", context=True, fields=FIELDS, access=author_has_access)
def grade(ctx: JobContext, answer_id: str) -> None:
    with ctx.db.transaction() as tx:  # the payload carries the id; the answer is re-read
        answer = answer_data(tx, answer_id)["answer"]
    if answer == REFUSED:
        raise PermanentError(f"answer {answer_id} cannot be graded")
    ctx.effect(f"answer:{answer_id}", lambda tx: _mark(tx, f"graded:{answer_id}"))


@app.task(queue="notify", context=True, fields=FIELDS, access=author_has_access)
def send(ctx: JobContext, answer_id: str) -> None:
    ctx.effect(f"notify:{answer_id}", lambda tx: _mark(tx, f"notified:{answer_id}"))

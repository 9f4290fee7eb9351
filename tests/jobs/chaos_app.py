"""The app the worker-process tests run in spawned children (imported by path)."""

from __future__ import annotations

import os
import time
import uuid

from pigeon.exceptions import PermanentError
from pigeon.jobs.app import App
from pigeon.jobs.backoff import Backoff
from pigeon.jobs.context import JobContext
from pigeon.jobs.timeouts import Timeouts
from pigeon.storage.base import Tx

SHORT = Timeouts(job=0.5, external_call=0.2, supervisor=0.8, lease=1.2)

app = App(default_owner="chaos-owner")
app.queue("chaos", max_workers=8, owner="chaos-team", timeouts=SHORT, backoff=Backoff(0.05, 0.2))
app.queue("slow", max_workers=4, timeouts=Timeouts(job=5, supervisor=6, lease=8), batch=1)


def _mark(tx: Tx, topic: str) -> None:
    # The business mutation: one outbox row per applied effect, so a second application
    # would show up as a second row under the same topic.
    tx.execute(
        "outbox_insert",
        {"message_id": uuid.uuid4().hex, "topic": topic, "payload": "{}", "now": time.time()},
    )


@app.task(queue="chaos", context=True)
def bump(ctx: JobContext, n: int, pause: float = 0.0) -> None:
    if n % 250 == 7:
        raise PermanentError(f"job {n} is refused for good")
    if pause:
        time.sleep(pause)
    ctx.effect(f"bump:{n}", lambda tx: _mark(tx, f"bump:{n}"))


@app.task(queue="slow", context=True)
def nap(ctx: JobContext, seconds: float, n: int) -> None:
    time.sleep(seconds)
    ctx.effect(f"nap:{n}", lambda tx: _mark(tx, f"nap:{n}"))


@app.task(queue="chaos")
def tick() -> None:
    _ = os.getpid()


app.periodic(every=0.5, task="tick", name="every-half-second")

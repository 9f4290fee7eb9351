"""The app of the rolling-deploy test (``test_rolling_deploy.py``) in its two generations,
chosen by ``PIGEON_TEST_DEPLOY_VERSION`` in the worker processes: version 1 is the app
before its task's payload changed (``{"n", "count"}``), version 2 after it (``{"n",
"quantity": {"units", "from"}}``), with the upcaster from the old shape, and with a task
that version 1 lacks (``welcome``, recorded in ``deploy_welcomed`` with the generation
that ran it).

Each run of the task is recorded in ``deploy_runs`` (its own transaction: every run, a
second one included) and its effect in ``deploy_effects`` (the effect's transaction:
claim, row and result together), each with the worker's generation and the version the
payload was enqueued with, so the test sees who ran what."""

from __future__ import annotations

import os
import time
from typing import Any

from pigeon.jobs.app import App
from pigeon.jobs.context import JobContext
from pigeon.jobs.timeouts import Timeouts
from pigeon.storage.base import Tx

VERSION_ENV = "PIGEON_TEST_DEPLOY_VERSION"
PAUSE = 0.01  # each run's work: long enough for SIGTERM to land mid-job
TABLES = (
    "CREATE TABLE deploy_runs (n integer NOT NULL, generation integer NOT NULL,"
    " enqueued integer NOT NULL, units integer NOT NULL)",
    "CREATE TABLE deploy_effects (n integer NOT NULL, generation integer NOT NULL,"
    " enqueued integer NOT NULL, units integer NOT NULL)",
    "CREATE TABLE deploy_welcomed (n integer NOT NULL, generation integer NOT NULL)",
)


def units(n: int) -> int:
    """What job ``n`` carries, whichever shape it has."""
    return n % 7 + 1


def v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    return {"n": payload["n"], "quantity": {"units": payload["count"], "from": 1}}


def _record(tx: Tx, table: str, row: dict[str, int]) -> None:
    mark = (lambda k: f":{k}") if tx.backend == "sqlite" else (lambda k: f"%({k})s")
    columns = ", ".join(row)
    values = ", ".join(mark(k) for k in row)
    tx.sql(f"INSERT INTO {table} ({columns}) VALUES ({values})", row)


def _apply(ctx: JobContext, n: int, amount: int, generation: int, enqueued: int) -> None:
    row = {"n": n, "generation": generation, "enqueued": enqueued, "units": amount}
    with ctx.db.transaction() as tx:
        _record(tx, "deploy_runs", row)
    time.sleep(PAUSE)
    ctx.effect(f"tally:{n}", lambda tx: _record(tx, "deploy_effects", row))


def make_app(version: int) -> App:
    app = App(default_owner="deploy-team")
    # A lease well past any pause of a loaded machine: no job is rescued from a live worker.
    app.queue("deploy", max_workers=8, timeouts=Timeouts(job=10, supervisor=12, lease=15))
    if version == 1:

        @app.task(queue="deploy", context=True, fields=("n", "count"))
        def tally(ctx: JobContext, n: int, count: int) -> None:
            _apply(ctx, n, count, 1, 1)

    else:

        @app.task(
            queue="deploy", name="tally", context=True, fields=("n", "quantity"), version=2,
            upcast={1: v1_to_v2},
        )  # fmt: skip
        def tally_v2(ctx: JobContext, n: int, quantity: dict[str, int]) -> None:
            _apply(ctx, n, quantity["units"], 2, quantity.get("from", 2))

        @app.task(queue="deploy", context=True, fields=("n",))
        def welcome(ctx: JobContext, n: int) -> None:
            row = {"n": n, "generation": version}
            ctx.effect(f"welcome:{n}", lambda tx: _record(tx, "deploy_welcomed", row))

    return app


def payload(n: int, version: int) -> dict[str, Any]:
    """Job ``n`` as a producer of ``version`` writes it."""
    if version == 1:
        return {"n": n, "count": units(n)}
    return {"n": n, "quantity": {"units": units(n)}}


app = make_app(int(os.environ.get(VERSION_ENV, "2")))

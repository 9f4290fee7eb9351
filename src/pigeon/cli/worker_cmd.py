"""``pigeon worker``: a supervisor of worker processes for the given queues."""

from __future__ import annotations

import logging
import os
from typing import Annotated

import typer

from pigeon.cli._db import check_db
from pigeon.exceptions import ConfigurationError, PigeonError
from pigeon.jobs.autoscale import Budget, parse_budget
from pigeon.jobs.supervisor import Supervisor, WorkerOptions

DEMO_APP = "pigeon.jobs.demo:app"


def parse_queues(values: list[str]) -> dict[str, int | Budget]:
    """``NAME=MAX`` (the queue's own minimum is the floor) or ``NAME=MIN:MAX``."""
    queues: dict[str, int | Budget] = {}
    for value in values:
        name, sep, spec = value.partition("=")
        try:
            if not sep or not name:
                raise ConfigurationError("missing '='")
            budget = parse_budget(spec)
            if isinstance(budget, int) and budget < 1:
                raise ConfigurationError("at least 1 thread")
        except ConfigurationError:
            raise typer.BadParameter(
                f"expected NAME=MAX or NAME=MIN:MAX threads, got {value!r}", param_hint="--queue"
            ) from None
        queues[name] = budget
    return queues


def worker(
    db: Annotated[
        str,
        typer.Option(
            "--db",
            help="Server database: an existing SQLite file or postgresql://...; "
            "checked once before any worker starts.",
        ),
    ],
    queue: Annotated[
        list[str],
        typer.Option(
            "--queue",
            help="NAME=MAX or NAME=MIN:MAX threads across all processes, repeatable; "
            "threads scale between them with the backlog.",
        ),
    ],
    app: Annotated[
        str,
        typer.Option(
            "--app",
            help="module:attr of a pigeon.jobs.App; the current directory is searched "
            "first (as uvicorn does), so myapp:app finds ./myapp.py.",
        ),
    ] = DEMO_APP,
    processes: Annotated[int, typer.Option(help="Worker processes.")] = min(2, os.cpu_count() or 1),
    recycle_jobs: Annotated[
        int | None, typer.Option(help="Replace a process after N jobs.")
    ] = None,
    recycle_mib: Annotated[
        float | None, typer.Option(help="Replace a process over M MiB RSS.")
    ] = None,
    batch: Annotated[int | None, typer.Option(help="Jobs claimed per round trip.")] = None,
) -> None:
    """Run jobs until SIGTERM (stop claiming; finish or release within the lease)."""
    try:
        supervisor = Supervisor(
            app,
            str(db),
            parse_queues(queue),
            processes=processes,
            options=WorkerOptions(recycle_jobs=recycle_jobs, recycle_mib=recycle_mib, batch=batch),
            app_dir=".",
        )
    except PigeonError as exc:
        raise typer.BadParameter(str(exc)) from exc
    # Once, here: a database the workers cannot open would fail every worker process at
    # its start, and the supervisor would relaunch them forever.
    check_db(db)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    budgets = {q: str(b) for q, b in supervisor.budgets.items()}
    typer.echo(f"pigeon worker: {len(supervisor.slots)} processes, threads min:max {budgets}")
    supervisor.run()

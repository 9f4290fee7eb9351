"""``pigeon worker``: a supervisor of worker processes for the given queues."""

from __future__ import annotations

import logging
import os
from typing import Annotated

import typer

from pigeon.exceptions import PigeonError
from pigeon.jobs.supervisor import Supervisor, WorkerOptions

DEMO_APP = "pigeon.jobs.demo:app"


def parse_queues(values: list[str]) -> dict[str, int]:
    queues: dict[str, int] = {}
    for value in values:
        name, sep, count = value.partition("=")
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise typer.BadParameter(f"expected NAME=THREADS, got {value!r}", param_hint="--queue")
        queues[name] = int(count)
    return queues


def worker(
    db: Annotated[
        str, typer.Option("--db", help="Server database: a SQLite path or postgresql://...")
    ],
    queue: Annotated[list[str], typer.Option("--queue", help="NAME=THREADS, repeatable.")],
    app: Annotated[str, typer.Option("--app", help="module:attr of a pigeon.jobs.App.")] = DEMO_APP,
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        supervisor = Supervisor(
            app,
            str(db),
            parse_queues(queue),
            processes=processes,
            options=WorkerOptions(recycle_jobs=recycle_jobs, recycle_mib=recycle_mib, batch=batch),
        )
    except PigeonError as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(f"pigeon worker: {len(supervisor.slots)} processes for {dict(parse_queues(queue))}")
    supervisor.run()

"""``pigeon worker``: a supervisor of worker processes for the given queues."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Annotated

import typer

from pigeon import logs
from pigeon.cli._db import check_db
from pigeon.cli.options import (
    DbOption,
    Finite,
    KeysFileOption,
    LogFormatOption,
    LogRedactOption,
    RelayToOption,
    load_keyring,
)
from pigeon.cli.relay_cmd import checked_broker_url, make_runner
from pigeon.core.imports import add_app_dir
from pigeon.exceptions import ConfigurationError, PigeonError
from pigeon.jobs.app import load_app
from pigeon.jobs.autoscale import Budget, budget_numbers, checked_budget
from pigeon.jobs.options import WorkerOptions
from pigeon.jobs.supervisor import Supervisor

DEMO_APP = "pigeon.reference.jobs:app"


def _budget(value: str, spec: str) -> int | Budget:
    """``MAX`` or ``MIN:MAX`` of ``--queue value``; a bad one is refused saying why."""
    try:
        least, most = budget_numbers(spec)
    except ConfigurationError:
        raise typer.BadParameter(
            f"expected NAME=MAX or NAME=MIN:MAX threads, got {value!r}", param_hint="--queue"
        ) from None
    try:
        return checked_budget(least, most)
    except ConfigurationError as exc:
        raise typer.BadParameter(f"{value!r}: {exc}", param_hint="--queue") from None


def parse_queues(values: list[str]) -> dict[str, int | Budget]:
    """``NAME=MAX`` (the queue's own minimum is the floor) or ``NAME=MIN:MAX``."""
    queues: dict[str, int | Budget] = {}
    for value in values:
        name, sep, spec = value.partition("=")
        if not sep or not name:
            raise typer.BadParameter(
                f"expected NAME=MAX or NAME=MIN:MAX threads, got {value!r}", param_hint="--queue"
            )
        if name in queues:
            raise typer.BadParameter(f"queue {name!r} is given twice", param_hint="--queue")
        queues[name] = _budget(value, spec)
    return queues


def check_app_queues(app_ref: str, queues: Iterable[str], db: str | None = None) -> None:
    """Refuse a queue the app neither declares nor gives a task: no job of it could run
    (an enqueue names a task of the app, on that task's queue), so its workers would
    only ever poll. ``db``: the workers' database, named to the app's loader."""
    try:
        jobs_app = load_app(app_ref, db=db)
    except PigeonError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--app'") from exc
    unknown = [q for q in queues if q not in jobs_app.queues]
    if unknown:
        known = ", ".join(sorted(jobs_app.queues)) or "none"
        raise typer.BadParameter(
            f"{app_ref} has no queue {', '.join(map(repr, unknown))} (its queues: {known})",
            param_hint="--queue",
        )


def worker(
    db: DbOption,
    queue: Annotated[
        list[str],
        typer.Option(
            "--queue",
            help="NAME=MAX or NAME=MIN:MAX threads across all processes, repeatable; "
            "threads scale between them with the backlog. NAME must be a queue of the "
            "app (declared, or the queue of one of its tasks).",
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
    # Recycling after 0 jobs or 0 MiB would replace every process as it starts (leaving
    # the option out means never); a batch of 0 would claim nothing.
    processes: Annotated[int, typer.Option(min=1, help="Worker processes.")] = min(
        2, os.cpu_count() or 1
    ),
    recycle_jobs: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Replace a process after exactly N started jobs, whatever it claimed "
            "(the rest go back ready; default: never).",
        ),
    ] = None,
    recycle_mib: Annotated[
        float | None,
        typer.Option(
            click_type=Finite(min=0, min_open=True),
            help="Replace a process over M MiB RSS (default: never).",
        ),
    ] = None,
    batch: Annotated[
        int | None,
        typer.Option(min=1, help="At most N jobs claimed per round trip (default: the queue's)."),
    ] = None,
    prefetch: Annotated[
        int,
        typer.Option(
            min=1,
            help="Jobs claimed per free thread (default 1: only what can start now; more "
            "are claimed, not started, and still count as waiting).",
        ),
    ] = 1,
    log_format: LogFormatOption = "text",
    log_redact: LogRedactOption = None,
    relay_to: RelayToOption = None,
    keys_file: KeysFileOption = None,
) -> None:
    """Run jobs until SIGTERM (stop claiming; finish or release within the lease).

    The --db must exist already (pigeon serve or a migration makes it); it is opened
    once here, before any worker process starts.
    """
    if relay_to is not None:
        checked_broker_url(relay_to, "worker")
    load_keyring(keys_file)  # refused here, not in every worker process at its start
    keys_path = os.path.abspath(keys_file) if keys_file else None
    budgets = parse_queues(queue)
    add_app_dir(".")  # as the Supervisor does, so the app imports here as it will there
    check_app_queues(app, budgets, str(db))
    try:
        supervisor = Supervisor(
            app,
            str(db),
            budgets,
            processes=processes,
            options=WorkerOptions(
                recycle_jobs=recycle_jobs,
                recycle_mib=recycle_mib,
                batch=batch,
                prefetch=prefetch,
                log_format=log_format,
                log_redact=tuple(log_redact or ()),
                keys_file=keys_path,
            ),
            app_dir=".",
        )
    except PigeonError as exc:
        raise typer.BadParameter(str(exc)) from exc
    # Once, here: a database the workers cannot open would fail every worker process at
    # its start, and the supervisor would relaunch them forever.
    check_db(db)
    logs.configure(log_format, logging.INFO, log_redact or ())
    runs = (
        "the reference app's jobs (--app module:attr runs yours)"
        if app == DEMO_APP
        else f"the app {app}"
    )
    typer.echo(f"pigeon worker: {runs}; {supervisor.sizes()}")
    runner = make_runner(db, relay_to, "worker", keys_file=keys_file).start() if relay_to else None
    try:
        supervisor.run()
    finally:
        if runner is not None:
            runner.stop()

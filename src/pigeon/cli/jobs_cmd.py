"""``pigeon jobs``: list jobs, inspect the failed store, retry or cancel after review."""

from __future__ import annotations

import getpass
import json
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.table import Table

from pigeon.cli._db import open_db
from pigeon.cli._format import console as make_console
from pigeon.cli._format import duration, error, shown, titled_table
from pigeon.cli.options import DbOption, Finite
from pigeon.core.imports import add_app_dir
from pigeon.exceptions import PigeonError
from pigeon.jobs.app import load_app
from pigeon.jobs.failed import FailedStore, list_jobs
from pigeon.jobs.job import JobStatus
from pigeon.jobs.retention import purge_finished
from pigeon.ops.queries import OBLIGATION_STATES, WINDOWS, overview

DEMO_APP = "pigeon.reference.jobs:app"

app = typer.Typer(help="Inspect and repair server jobs.", no_args_is_help=True)
console = make_console()

# SQLite and PostgreSQL keep ids as 64-bit integers: a larger number is no job, and was
# an OverflowError from the driver.
MAX_ID = 2**63 - 1
JobIdArg = Annotated[int, typer.Argument(metavar="ID", min=1, max=MAX_ID)]
Limit = Annotated[int, typer.Option(min=0, help="At most this many rows.")]


def _age(ts: float | None) -> str:
    if ts is None:
        return "-"
    seconds = max(0.0, time.time() - ts)
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def _attempts(row: dict[str, Any]) -> str:
    """Attempts used of the current budget: a reviewed retry starts a fresh one, so after
    it the total (in brackets) can exceed max_attempts without the job being over it."""
    used = row["attempts"] - row["attempt_base"]
    total = f" ({row['attempts']})" if row["attempt_base"] else ""
    return f"{used}/{row['max_attempts']}{total}"


def _table(rows: list[dict[str, Any]], title: str, failed: bool) -> Table:
    table = titled_table(title)
    for column in ("id", "queue", "task", "status", "attempts", "age"):
        table.add_column(column, justify="right" if column in ("id", "attempts") else "left")
    if failed:
        table.add_column("owner")
        table.add_column("last error", overflow="fold", max_width=60)
    for row in rows:
        cells = [
            str(row["id"]),
            shown(row["queue"]),
            shown(row["task"]),
            shown(row["status"]),
            _attempts(row),
            _age(row["created_at"]),
        ]
        if failed:
            last = (row["last_error"] or "").splitlines()[-1:]
            cells += [shown(row["owner"] or "-"), shown(last[0] if last else "-")]
        table.add_row(*cells)
    return table


@app.command("list")
def list_cmd(
    db: DbOption,
    # A choice, not free text: a misspelt status would list nothing, read as "none".
    status: Annotated[JobStatus | None, typer.Option(help="Only jobs in this status.")] = None,
    queue: Annotated[str | None, typer.Option(help="Only this queue.")] = None,
    limit: Limit = 50,
) -> None:
    """The most recent jobs."""
    wanted = None if status is None else status.value
    rows = list_jobs(open_db(db), status=wanted, queue=queue, limit=limit)
    console.print(_table(rows, _count(len(rows), "job"), failed=False))


@app.command("failed")
def failed_cmd(db: DbOption, queue: str | None = None, limit: Limit = 50) -> None:
    """The failed store: jobs awaiting review, with their owner and last error."""
    rows = FailedStore(open_db(db)).list(queue=queue, limit=limit)
    console.print(_table(rows, f"{_count(len(rows), 'failed job')} awaiting review", failed=True))


def _review(action: str, db: str, job_id: int, reason: str, reviewer: str | None) -> None:
    store = FailedStore(open_db(db))
    who = reviewer or getpass.getuser()
    try:
        getattr(store, action)(job_id, reviewer=who, reason=reason)
    except PigeonError as exc:
        error(exc)
        raise typer.Exit(1) from exc
    done = "queued again with fresh budgets" if action == "retry" else "cancelled"
    console.print(f"job {job_id} {done} (reviewer {shown(who)}: {shown(reason)})")


@app.command("retry")
def retry_cmd(
    job_id: JobIdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why it is safe to run again.")],
    db: DbOption,
    reviewer: Annotated[str | None, typer.Option(help="Defaults to the current user.")] = None,
) -> None:
    """Queue a failed job again after review, with fresh attempt and age budgets."""
    _review("retry", db, job_id, reason, reviewer)


@app.command("cancel")
def cancel_cmd(
    job_id: JobIdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why it will never run.")],
    db: DbOption,
    reviewer: Annotated[str | None, typer.Option(help="Defaults to the current user.")] = None,
) -> None:
    """Cancel a failed or queued job after review; its obligation is closed as cancelled."""
    _review("cancel", db, job_id, reason, reviewer)


def _seconds(value: float | None) -> str:
    return duration(value, switch=2)  # "7.0d", not "10080.0m"; "90.0s", not "1.5m"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@app.command("stats")
def stats_cmd(
    db: DbOption,
    app_ref: Annotated[
        str, typer.Option("--app", help="module:attr of the App whose objectives apply.")
    ] = DEMO_APP,
    window: Annotated[
        str, typer.Option(help=f"Records received in the last: {', '.join(WINDOWS)}.")
    ] = "24h",
    as_json: Annotated[
        bool, typer.Option("--json", help="The figures as JSON (those of /pigeon/v1/dashboard).")
    ] = False,
) -> None:
    """Records, obligations and, per queue, ready, delayed, reserved, stuck, failed by
    owner, freshness vs objective: the figures of the operations page (pigeon.ops)."""
    add_app_dir(".")  # --app myapp:app finds ./myapp.py, as `pigeon worker` does
    try:
        jobs_app = load_app(app_ref)
    except PigeonError as exc:
        raise typer.BadParameter(str(exc), param_hint="--app") from exc
    if window not in WINDOWS:
        raise typer.BadParameter(f"one of {', '.join(WINDOWS)}", param_hint="--window")
    view = overview(open_db(db), jobs_app, window=WINDOWS[window])
    if as_json:
        typer.echo(json.dumps(view, sort_keys=True, default=str))
        return
    estimated = set(view["estimated"])

    def n(value: int, label: str) -> str:
        return f"≈{value}" if label in estimated else str(value)

    records = view["records"]
    console.print(
        f"records, last {window}: {n(records['received'], 'records.received')} received, "
        f"{n(records['completed'], 'records.completed')} complete, "
        f"{n(records['open'], 'records.open')} open"
    )
    if view["obligations"]:
        owed = titled_table("obligations (oldest owed: pending, in progress or failed)")
        owed.add_column("kind")
        for status in OBLIGATION_STATES:
            owed.add_column(status.replace("_", " "), justify="right")
        owed.add_column("oldest owed", justify="right")
        for name, o in view["obligations"].items():
            owed.add_row(
                shown(name),
                *(n(o[s], f"obligations.{name}.{s}") for s in OBLIGATION_STATES),
                _seconds(o["oldest_owed_age"]),
            )
        console.print(owed)
    table = titled_table("queues (ready = queued and due; stuck = reserved, lease expired)")
    for column in ("queue", "ready", "delayed", "reserved", "stuck", "failed"):
        table.add_column(column, justify="left" if column == "queue" else "right")
    table.add_column("failed by owner")
    table.add_column("oldest ready", justify="right")
    table.add_column("objective", justify="right")
    table.add_column("breach")
    for row in view["queues"]:
        q = row["queue"]
        owners: dict[str, int] = {}
        for g in view["failed"]["groups"]:
            if g["queue"] == q:
                owners[g["owner"]] = owners.get(g["owner"], 0) + g["count"]
        table.add_row(
            shown(q),
            *(n(row[s], f"queues.{q}.{s}") for s in ("ready", "delayed", "reserved", "stuck")),
            n(row["failed"], f"queues.{q}.failed"),
            shown(", ".join(f"{o}: {c}" for o, c in sorted(owners.items())) or "-"),
            _seconds(row["oldest_ready_age"]),
            _seconds(row["objective"]),
            "[red]yes[/red]" if row["breach"] else "no",
        )
    console.print(table)
    _print_versions(view["versions"], n)
    rec, relay = view["reconciliation"], view["relay"]
    console.print(
        f"reconciliation, last {window}: {rec['created_total']} obligations created, "
        f"{rec['completed_total']} completed, {rec['effects_recorded']} effects recorded, "
        f"{rec['notifications']['confirmed']} of {rec['notifications']['created']} "
        f"notifications confirmed; without a job: {rec['without_job']['count']} (must be 0)"
    )
    console.print(f"relay: {relay['pending']} unpublished, oldest {_seconds(relay['oldest_age'])}")
    if estimated:
        console.print("≈: estimated by the PostgreSQL planner (large table)")


def _print_versions(versions: dict[str, Any], n: Callable[[int, str], str]) -> None:
    """The live workers, and the jobs of each versioned task (or of a task no live worker
    of its queue knows) that wait for a newer one."""
    workers = versions["workers"]
    console.print(f"workers: {_count(len(workers), 'live worker')}")
    if not versions["waiting"]:
        return
    table = titled_table("payload versions (waiting: for a worker that runs their version)")
    for column in ("task", "queue", "live workers run", "newest waiting", "waiting"):
        table.add_column(column, justify="left" if column in ("task", "queue") else "right")
    for v in versions["waiting"]:
        waiting = n(v["waiting"], f"versions.{v['task']}.waiting")
        table.add_row(
            shown(v["task"]), shown(v["queue"]),
            f"v{v['known']}" if v["known"] else "not the task", f"v{v['newest']}",
            f"[red]{waiting}[/red]" if v["waiting"] else waiting,
        )  # fmt: skip
    console.print(table)


@app.command("purge")
def purge_cmd(
    db: DbOption,
    older_than: Annotated[
        float,
        typer.Option(
            "--older-than",
            click_type=Finite(min=0, min_open=True),
            help="Seconds since a job finished.",
        ),
    ] = 7 * 24 * 3600.0,
    batch: Annotated[int, typer.Option(min=1, help="Jobs per transaction.")] = 500,
) -> None:
    """Delete succeeded and cancelled jobs (and their history) finished before the
    retention; failed jobs stay in the failed store."""
    try:
        purged = purge_finished(open_db(db), older_than, batch=batch)
    except PigeonError as exc:
        raise typer.BadParameter(str(exc)) from exc
    console.print(f"purged {_count(purged, 'finished job')} older than {_seconds(older_than)}")

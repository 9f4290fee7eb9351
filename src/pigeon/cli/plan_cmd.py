"""``pigeon plan``: how many workers a queue needs, and how long its backlog takes."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console

from pigeon.cli._db import open_db
from pigeon.cli._format import shown, titled_table
from pigeon.cli.options import DB_ENV, Finite
from pigeon.cli.secrets import FILE_HELP, secret_url
from pigeon.exceptions import PigeonError
from pigeon.jobs import planner
from pigeon.jobs._db import reading
from pigeon.jobs.stats import percentiles

console = Console()


@dataclass(frozen=True)
class ServiceTime:
    """The measured durations of a queue's latest successful attempts, in seconds."""

    mean: float
    median: float
    p95: float
    samples: int


def measured_service_time(db: str, queue: str, limit: int = 1000) -> ServiceTime:
    """The latest successful attempts of ``queue``: their mean, the S of the planner's
    formula (capacity = workers / mean service time: over many jobs a worker is busy for
    the sum of their durations, which the mean gives and the median, blind to a slow tail,
    does not), with the median and p95 to show beside it."""
    database = open_db(db)  # refuses a missing file (never creates one), a foreign one
    try:
        with reading(database) as tx:
            rows = tx.fetchall("job_service_times", {"queue": queue, "limit": limit})
    finally:
        database.close()
    if not rows:
        raise typer.BadParameter(f"no finished jobs of queue {queue!r} in {db}", param_hint="--db")
    seconds = [float(r["seconds"]) for r in rows]
    p95 = percentiles(seconds, (95,))["p95"]
    return ServiceTime(statistics.fmean(seconds), statistics.median(seconds), p95, len(seconds))


def _num(x: float) -> str:
    return f"{x:,.2f}".rstrip("0").rstrip(".")


def _seconds(x: float) -> str:
    """Seconds to 4 significant digits below 1 s (a measured 0.0012 s is not "0")."""
    if x == 0 or abs(x) >= 1:
        return _num(x)
    decimals = max(2, 3 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}".rstrip("0").rstrip(".")


def _counts(workers: str | None) -> list[int] | None:
    if not workers:
        return None
    counts = []
    for item in workers.split(","):
        try:
            counts.append(int(item))
        except ValueError:
            raise typer.BadParameter(
                f"{item.strip()!r} is not a whole number of workers (in {workers!r})",
                param_hint="--workers",
            ) from None
    return counts


def plan(
    ctx: typer.Context,
    backlog: Annotated[int, typer.Option("--backlog", min=0, help="Jobs waiting now (B).")],
    arrival_rate: Annotated[
        float,
        typer.Option("--arrival-rate", click_type=Finite(min=0), help="New jobs per second (L)."),
    ],
    target: Annotated[
        float,
        typer.Option(
            "--target",
            click_type=Finite(min=0, min_open=True),
            help="Drain within this many seconds (T).",
        ),
    ],
    service_time: Annotated[
        float | None,
        typer.Option(
            "--service-time",
            click_type=Finite(min=0, min_open=True),
            help="Seconds per job (S); or take it from --db.",
        ),
    ] = None,
    workers: Annotated[
        str | None, typer.Option("--workers", help="Counts to compare, e.g. 6,12,18.")
    ] = None,
    memory_per_worker: Annotated[
        float | None,
        typer.Option("--memory-per-worker", click_type=Finite(min=0), help="MiB each."),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            envvar=DB_ENV,
            callback=secret_url,
            help="Take S from this server database's history (an existing SQLite file or "
            "postgresql://...): the mean of its latest successful jobs of --queue (the median "
            "and p95 shown beside it). "
            f"Not together with --service-time (which wins over ${DB_ENV}); {FILE_HELP}.",
        ),
    ] = None,
    queue: Annotated[str, typer.Option("--queue", help="Queue whose history gives S.")] = "default",
) -> None:
    """Ideal throughput, net drain and drain time per worker count; the minimum workers."""
    counts = _counts(workers)
    source = ctx.get_parameter_source("db")
    if service_time is not None and source is not None and source.name == "ENVIRONMENT":
        db = None  # $PIGEON_DB is a default, for the commands that need a database
    if db is not None and service_time is not None:
        # Which one should win is a guess either way: ask for one.
        raise typer.BadParameter(
            "give --service-time or --db (which measures it), not both",
            param_hint="--service-time",
        )
    if db is not None:
        measured = measured_service_time(db, queue)
        service_time = measured.mean
        console.print(
            f"S = {_seconds(measured.mean)} s (mean of {measured.samples} jobs of "
            f"{shown(repr(queue))}; median {_seconds(measured.median)} s, "
            f"p95 {_seconds(measured.p95)} s)"
        )
    if service_time is None:
        raise typer.BadParameter("give --service-time or --db", param_hint="--service-time")
    try:
        result = planner.plan(
            backlog, service_time, arrival_rate, target, counts, memory_per_worker
        )
    except PigeonError as exc:
        raise typer.BadParameter(str(exc)) from exc
    except (ArithmeticError, ValueError) as exc:  # finite inputs whose product is not
        raise typer.BadParameter(f"numbers too large to plan with ({exc})") from exc
    table = titled_table(
        f"B={backlog} S={_seconds(service_time)}s L={_num(arrival_rate)}/s T={_num(target)}s"
    )
    for column in ("workers", "throughput/s", "net drain/s", "fluid drain", "waves", "wave bound"):
        table.add_column(column, justify="right")
    if memory_per_worker is not None:
        table.add_column("memory", justify="right")
    for row in result.rows:
        cells = [
            str(row.workers),
            _num(row.throughput),
            _num(row.net_drain),
            "no drain" if row.drain_seconds is None else f"{_num(row.drain_seconds)} s",
            str(row.waves),
            # Waves bound the drain only when nothing new arrives meanwhile.
            f"{_num(row.wave_seconds)} s" if arrival_rate == 0 else "-",
        ]
        if row.memory_mib is not None:
            cells.append(f"{row.memory_mib:,.0f} MiB")
        table.add_row(*cells)
    console.print(table)
    console.print(
        f"minimum workers for T={_num(target)} s: {result.min_workers} "
        f"(w >= S x (L + B/T) = {_seconds(service_time)} x ({_num(arrival_rate)} + "
        f"{backlog}/{_num(target)}))"
    )
    if memory_per_worker is not None:
        console.print(
            f"memory budget at {result.min_workers} workers: "
            f"{planner.memory_budget(result.min_workers, memory_per_worker):,.0f} MiB"
        )

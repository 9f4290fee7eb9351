"""``pigeon demo``: an offline editing session synced through a faulty network, reconciled."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pigeon.cli._format import titled_table
from pigeon.cli.options import Finite
from pigeon.demo.run import DemoReport, run_demo
from pigeon.edge.queue import OfflineQueue

# The plan takes up to 1/3 per kind (the three exclusive kinds then fault every request),
# but the demo must also finish clean: at 0.3 (9 requests in 10 faulted) an operation now
# and then used up its 8 attempts and was dead-lettered (1 in 400, seed 1), at 0.33 most
# were. 0.25 (3 in 4 faulted) passed every seed tried, in 4-6 s.
MAX_DEMO_FAULT_RATE = 0.25


FaultRateOption = Annotated[
    float,
    typer.Option(
        click_type=Finite(min=0.0, max=MAX_DEMO_FAULT_RATE),
        help="Share of requests EACH fault kind hits, at most 0.25: a request is "
        "dropped, answered 503 or has its answer dropped, never two of these, so 0.25 "
        "faults 3 requests in 4 (more leaves operations in the dead letters after their "
        "8 attempts).",
    ),
]
WorkdirOption = Annotated[
    Path | None,
    typer.Option(
        file_okay=False,
        help="With --conflicts: keep the devices' queue files and the server's database "
        "here (a new or empty folder), for `pigeon conflicts list -f DIR/phone.db`.",
    ),
]
# The options of the sync demo: given with --conflicts (a fixed scenario), each is refused.
_SYNC_OPTIONS = (
    "operations", "notes", "fault_rate", "batch", "seed", "timeout", "concurrency", "pipeline"
)  # fmt: skip


def demo(
    ctx: typer.Context,
    operations: Annotated[int, typer.Option(min=1, help="Edits the user makes.")] = 400,
    notes: Annotated[int, typer.Option(min=1, help="Notes the session may create.")] = 120,
    fault_rate: FaultRateOption = 0.1,
    batch: Annotated[int, typer.Option(min=0, help="Batch size; 0 sends one by one.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the session and the faults.")] = 7,
    timeout: Annotated[
        float,
        typer.Option(
            click_type=Finite(min=0.0), help="Stop waiting for the sync after this many s."
        ),
    ] = 120,
    concurrency: Annotated[
        int, typer.Option(min=1, max=64, help="Requests on the wire at once.")
    ] = 1,
    pipeline: Annotated[int, typer.Option(min=1, max=16, help="Batches on the way at once.")] = 1,
    conflicts: Annotated[
        bool,
        typer.Option("--conflicts", help="Two offline devices edit the same notes instead."),
    ] = False,
    workdir: WorkdirOption = None,
) -> None:
    """Edit notes offline, sync through a faulty network, prove every edit landed once."""
    if conflicts:
        _conflicts_demo(ctx, workdir)
        return
    if workdir is not None:
        raise typer.BadParameter(
            "only the --conflicts demo keeps its files", param_hint="--workdir"
        )
    console = Console()
    report = _sync_demo(
        console,
        operations=operations,
        notes=notes,
        fault_rate=fault_rate,
        batch=batch,
        seed=seed,
        timeout=timeout,
        concurrency=concurrency,
        pipeline=pipeline,
    )
    console.print(_faults_table(report))
    console.print(_reconciliation_table(report))
    console.print(verdict(report, timeout))
    if not report.ok:
        raise typer.Exit(1)


def _conflicts_demo(ctx: typer.Context, workdir: Path | None) -> None:
    """``--conflicts``: its scenario is fixed, so an option of the sync demo given with it
    (it would be ignored) is refused."""
    ignored = [
        f"--{name.replace('_', '-')}"
        for name in _SYNC_OPTIONS
        if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
    ]
    if ignored:
        raise typer.BadParameter(
            f"{', '.join(ignored)} do not apply to --conflicts (a fixed scenario)",
            param_hint="--conflicts",
        )
    from pigeon.cli.demo_conflicts import show_conflicts_demo

    show_conflicts_demo(workdir)


def _sync_demo(console: Console, **settings: Any) -> DemoReport:
    """The offline session with a progress bar, after saying what it is about to do;
    ``settings`` are `run_demo`'s."""
    console.rule("[bold]pigeon demo")
    console.print(
        f"A phone makes {settings['operations']} edits on up to {settings['notes']} notes: a "
        f"quarter on the platform, half in a tunnel, the rest after it. The network "
        f"misbehaves throughout: dropped requests, responses dropped after the server "
        f"committed, 503s, delays and duplicated requests, each on "
        f"{settings['fault_rate']:.0%} of requests."
    )

    def offline(queue: OfflineQueue) -> None:
        stats = queue.stats()
        console.print(
            f"\n[bold]In the tunnel[/]: {stats.depth} operations waiting durably; "
            f"{stats.coalesced} edits folded into earlier unsent ones so far."
        )
        console.print(_queue_table(queue))

    with Progress(
        TextColumn("[bold]syncing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task("sync", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return run_demo(**settings, on_offline=offline, progress=progress)


def verdict(report: DemoReport, timeout: float) -> str:
    """The last line: what went right, or first of all whether the sync ran out of time
    (then the operations still queued are pending, not lost, and nothing is proven)."""
    if report.ok:
        return f"[bold green]Every edit took effect exactly once[/] ({report.seconds:.1f} s)."
    if report.timed_out:
        return (
            f"[bold red]The sync timed out[/] after {timeout:g} s: {report.pending} "
            "operation(s) still pending, durably queued with their keys (not lost), "
            "so exactly-once is not proven; see the table above."
        )
    return "[bold red]Reconciliation failed[/]: see the table above."


def _queue_table(queue: OfflineQueue, rows: int = 8) -> Table:
    table = titled_table("the queue as it stands (first operations)")
    for column in ("#", "type", "entity", "method", "endpoint", "idempotency key"):
        table.add_column(column)
    for op in queue.pending[:rows]:
        table.add_row(
            str(op.seq), op.type, op.entity, op.method or "", op.endpoint or "", op.idempotency_key
        )
    return table


def _faults_table(report: DemoReport) -> Table:
    table = titled_table("what the network did")
    table.add_column("fault")
    table.add_column("requests", justify="right")
    labels = {
        "requests": "requests sent through the proxy",
        "drop_request": "dropped before the server",
        "drop_response": "answered, then the answer dropped",
        "error": "503 from the network",
        "delay": "delayed",
        "duplicate": "duplicated",
    }
    for key, label in labels.items():
        table.add_row(label, str(report.faults.get(key, 0)))
    return table


def _reconciliation_table(report: DemoReport) -> Table:
    table = titled_table("reconciliation")
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_column("expected")
    rows = [
        ("edits made", report.made, ""),
        ("coalesced away", report.coalesced_away, ""),
        ("operations queued", report.queued, ""),
        ("delivered", report.delivered, f"= {report.queued}"),
        ("effects on the server", report.effects, f"= {report.queued}"),
        ("duplicates", report.duplicates, "0"),
        ("lost", report.lost, "0"),
        ("pending at timeout" if report.timed_out else "pending", report.pending, "0"),
        ("dead letters", report.dead, "0"),
    ]
    for label, value, expected in rows:
        table.add_row(label, str(value), expected)
    verdict = "yes" if report.state_matches else f"NO: {', '.join(report.mismatched_notes[:5])}"
    table.add_row("server notes = what the user wrote", verdict, "yes")
    return table

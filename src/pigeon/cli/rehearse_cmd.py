"""``pigeon rehearse``: the failure list against an app, on a throwaway database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pigeon.cli._format import console as make_console
from pigeon.cli._format import shown, titled_table
from pigeon.cli.options import DB_ENV, RELAY_TO_ENV, Finite
from pigeon.cli.secrets import secret_url
from pigeon.core.imports import add_app_dir
from pigeon.exceptions import ConfigurationError
from pigeon.rehearse.report import RunReport, ScenarioResult
from pigeon.rehearse.runner import REFERENCE_JOBS, RehearseOptions, run_rehearsal
from pigeon.rehearse.scenarios import SCENARIOS

OUTCOME_STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow"}


def _list(console: Console) -> None:
    table = titled_table("scenarios")
    table.add_column("name")
    table.add_column("what it proves")
    for scenario in SCENARIOS.values():
        table.add_row(scenario.name, scenario.summary)
    console.print(table)


def _line(console: Console, result: ScenarioResult) -> None:
    style = OUTCOME_STYLE[result.outcome]
    why = f": {shown(result.reason)}" if result.reason else ""
    console.print(f"[{style}]{result.outcome:>7}[/] {result.name} ({result.seconds:.1f} s){why}")


def _drain(result: ScenarioResult) -> str:
    rec = result.reconciliation
    if rec.drain_seconds is None:
        return "-"
    if rec.predicted_seconds is None:
        return f"{rec.drain_seconds:.1f} s"
    return f"{rec.drain_seconds:.1f} s / {rec.predicted_seconds:.1f} s"


def summary_table(report: RunReport) -> Table:
    """One row a scenario: its outcome and the reconciliation's figures."""
    table = titled_table("rehearsal")
    table.add_column("scenario")
    table.add_column("outcome")
    for column in ("requests", "jobs", "duplicates", "lost", "drain / predicted", "time"):
        table.add_column(column, justify="right")
    for r in report.scenarios:
        rec = r.reconciliation
        counted = r.outcome != "skipped" and bool(rec.expected)
        table.add_row(
            r.name,
            f"[{OUTCOME_STYLE[r.outcome]}]{r.outcome}[/]",
            str(r.requests),
            str(r.jobs),
            str(rec.duplicates) if counted else "-",
            str(rec.lost) if counted else "-",
            _drain(r),
            f"{r.seconds:.1f} s",
        )
    return table


def _reconciled(result: ScenarioResult) -> str:
    rec = result.reconciliation
    figures = {}
    if rec.expected:
        figures = {
            "obligations created": rec.obligations,
            "effects recorded": rec.effects,
            "duplicates": rec.duplicates,
            "lost": rec.lost,
        }
    if rec.failed_with_owner:
        figures["failed with owner"] = rec.failed_with_owner
    figures |= rec.counts
    if rec.failed_without_owner:
        figures["failed without owner"] = rec.failed_without_owner
    text = ", ".join(f"{shown(k)} {v}" for k, v in figures.items())
    if rec.tolerance:
        text += f"; drain within {shown(rec.tolerance)}"
    return text


def _details(console: Console, report: RunReport) -> None:
    for r in report.scenarios:
        if r.outcome == "skipped":
            console.print(f"[yellow]{r.name} skipped[/]: {shown(r.reason)}")
            continue
        console.print(f"[bold]{r.name}[/]: " + "; ".join(shown(step) for step in r.done))
        console.print("  " + _reconciled(r))
        for problem in r.problems:
            console.print(f"  [bold red]problem[/]: {shown(problem)}")


AppOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        help="module:factory of the app to rehearse, as `pigeon serve --app` takes it "
        "(default: the reference notes app).",
        show_default=False,
    ),
]
JobsOption = Annotated[
    str,
    typer.Option("--jobs", help="module:attr of its pigeon.jobs.App, as `pigeon worker --app`."),
]
NextJobsOption = Annotated[
    str | None,
    typer.Option(
        "--next-jobs",
        help="module:attr of the next version's pigeon.jobs.App (changed payloads, their "
        "upcasters), deployed mid-job by deploy-mid-job (default: the same app again).",
        show_default=False,
    ),
]
HooksOption = Annotated[
    str | None,
    typer.Option(
        "--hooks",
        help="module:attr of a pigeon.rehearse.RehearsalHooks: request makers per route, "
        "the app's own tables, how a principal is revoked (default: the OpenAPI examples).",
        show_default=False,
    ),
]
RehearseDbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar=DB_ENV,
        callback=secret_url,
        help="A SQLite path or postgresql:// URL naming a database that does not exist "
        "yet: made, and dropped at the end (default: a temporary SQLite file). One that "
        "holds data is refused unless --i-know.",
        show_default=False,
    ),
]
ScenarioOption = Annotated[
    list[str] | None,
    typer.Option("--scenario", help="Run this scenario (repeatable; default: all; see --list)."),
]
ScaleOption = Annotated[
    int, typer.Option("--scale", min=1, help="How hard each scenario pushes: its requests x N.")
]
RateOption = Annotated[
    float,
    typer.Option(
        "--rate", click_type=Finite(min=0.1), help="The app's normal arrival rate, requests/s."
    ),
]
PeakOption = Annotated[
    float,
    typer.Option(
        "--peak", click_type=Finite(min=1.0), help="The peak scenario's multiple of --rate."
    ),
]
ReportOption = Annotated[
    Path | None,
    typer.Option("--report", help="Write the report as JSON to this file.", show_default=False),
]
RelayOption = Annotated[
    str | None,
    typer.Option(
        "--relay-to",
        envvar=RELAY_TO_ENV,
        callback=secret_url,
        help="The broker the app relays its outbox to (redis://, nats:// or amqp://): a "
        "relay runs beside the server, under names of the run's own there, removed at the "
        "end. Without it relay-down is skipped.",
        show_default=False,
    ),
]
ListOption = Annotated[bool, typer.Option("--list", help="List the scenarios and exit.")]
IKnowOption = Annotated[
    bool, typer.Option("--i-know", help="Run on a database that holds data anyway.")
]


def rehearse(
    app: AppOption = None,
    jobs: JobsOption = REFERENCE_JOBS,
    next_jobs: NextJobsOption = None,
    hooks: HooksOption = None,
    db: RehearseDbOption = None,
    scenario: ScenarioOption = None,
    scale: ScaleOption = 1,
    rate: RateOption = 5.0,
    peak: PeakOption = 4.0,
    relay_to: RelayOption = None,
    report: ReportOption = None,
    list_: ListOption = False,
    i_know: IKnowOption = False,
) -> None:
    """Run the failure list against an app on a throwaway database; exit 1 if any failed.

    Real processes: its own `pigeon serve` on loopback (test hooks on) and `pigeon
    worker`, SIGKILLed and restarted where a scenario calls for it, all ended with it.
    """
    console = make_console()
    if list_:
        _list(console)
        return
    try:
        options = RehearseOptions(
            app=app, jobs=jobs, hooks=hooks, db=db, scenarios=tuple(scenario or ()),
            scale=scale, rate=rate, peak=peak, i_know=i_know, relay_to=relay_to,
            next_jobs=next_jobs,
        )  # fmt: skip
    except ConfigurationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    add_app_dir(".")  # as pigeon worker and uvicorn do: myapp:app finds ./myapp.py
    console.print(f"rehearsing {shown(options.app or 'the reference app')} ({shown(jobs)})")
    result = run_rehearsal(options, progress=lambda r: _line(console, r))
    console.print(summary_table(result))
    _details(console, result)
    if report is not None:
        report.write_text(result.dumps() + "\n")
    counts = result.counts()
    verdict = "[green]passed[/]" if result.ok else "[bold red]FAILED[/]"
    console.print(
        f"{verdict}: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped in {result.seconds:.0f} s"
    )
    if not result.ok:
        raise typer.Exit(1)

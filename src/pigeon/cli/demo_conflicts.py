"""``pigeon demo --conflicts``: the table of what each conflict strategy did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from pigeon.cli._format import titled_table
from pigeon.demo.conflicts import PHONE_SKEW, run_conflicts_demo


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def show_conflicts_demo(workdir: Path | None = None) -> None:
    """``workdir``: keep the devices' queues and the server's database there (else they
    live in a temporary folder, gone when the demo ends)."""
    if workdir is not None:
        if workdir.exists() and any(workdir.iterdir()):
            raise typer.BadParameter(f"{workdir} is not empty", param_hint="--workdir")
        workdir.mkdir(parents=True, exist_ok=True)
    console = Console()
    console.rule("[bold]pigeon demo --conflicts")
    console.print(
        "A phone (its clock "
        f"{PHONE_SKEW / 3600:.0f} h fast) and a laptop share five entities, go offline, and "
        "both edit every one of them. The laptop reconnects first, then the phone. Each "
        "entity's type picks its conflict strategy."
    )
    rows = run_conflicts_demo(workdir)
    table = titled_table("what each strategy did", show_lines=True)
    for column in ("entity", "strategy", "phone wrote", "laptop wrote", "server now", "what"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            row.entity,
            row.strategy,
            _text(row.phone),
            _text(row.laptop),
            _text(row.server),
            row.outcome,
        )
    console.print(table)
    if workdir is None:
        console.print(
            "No edit was dropped without a record (run with --workdir DIR to keep the "
            "devices' queues, then `pigeon conflicts list --all -f DIR/phone.db`)."
        )
    else:
        console.print(
            "No edit was dropped without a record: see `pigeon conflicts list --all -f "
            f"{workdir / 'phone.db'}` (and laptop.db)."
        )

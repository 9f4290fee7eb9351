"""``pigeon queue``: inspect and repair an edge queue file."""

from __future__ import annotations

import typer

app = typer.Typer(help="Inspect and repair an offline queue file.", no_args_is_help=True)

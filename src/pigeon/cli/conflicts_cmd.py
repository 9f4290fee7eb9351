"""``pigeon conflicts``: the conflicts of an edge queue, and the user's choice for held ones.

    pigeon conflicts list -f queue.db              # held (waiting for you) by default
    pigeon conflicts list -f queue.db --all        # every recorded outcome
    pigeon conflicts show -f queue.db 3
    pigeon conflicts resolve -f queue.db 3 --keep local|remote|both
    pigeon conflicts resolve -f queue.db 3 --merged merged.json

A resolution enqueues a NEW operation (new idempotency key) against the server's current
version; the app's sync engine sends it the next time it runs.

``list`` first brings the records up to date with the queue (`ConflictStore.reconcile`):
one held record per conflict-held operation, so its count is the ``conflicts`` of ``pigeon
queue stats``. Conflicts held by an engine without a resolver are listed with strategy
``none`` and are resolved like any other (an engine with a resolver takes them over).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from pigeon.cli._format import console, error, shown, titled_table
from pigeon.cli.queue_cmd import QueueFile, open_queue
from pigeon.edge.conflicts import KEEPS, ConflictStore

app = typer.Typer(help="List, inspect and resolve conflicts of a queue.", no_args_is_help=True)

ConflictId = Annotated[
    int, typer.Argument(help="Conflict id (see `pigeon conflicts list`).", min=1, max=2**63 - 1)
]

out = console()


@contextlib.contextmanager
def _open(path: Path) -> Iterator[ConflictStore]:
    with open_queue(path) as queue:
        yield ConflictStore(queue)


def _short(value: Any, width: int = 60) -> str:
    text = "" if value is None else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


@app.command("list")
def list_(
    file: QueueFile,
    all_: Annotated[bool, typer.Option("--all", help="Every outcome, not only held.")] = False,
    limit: Annotated[int, typer.Option(min=0, help="At most this many rows.")] = 100,
) -> None:
    """Conflicts waiting for you (or, with --all, everything recorded)."""
    with _open(file) as store:
        store.reconcile()
        records = store.records(None if all_ else "held", limit)
        table = titled_table(shown(f"{file}: {len(records)} conflict(s)"))
        for column in ("id", "entity", "strategy", "outcome", "local", "remote"):
            table.add_column(column, overflow="fold")
        for r in records:
            cells = (r.id, r.entity, r.strategy, r.outcome, _short(r.local), _short(r.remote))
            table.add_row(*map(shown, cells))
        out.print(table)


@app.command()
def show(file: QueueFile, conflict_id: ConflictId) -> None:
    """Everything about one conflict: base, local and remote versions, the outcome."""
    with _open(file) as store:  # a PigeonError (e.g. no such conflict): message, exit 1
        r = store.get(conflict_id)
        table = titled_table(f"conflict {r.id}", show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value", overflow="fold")
        for name in (
            "entity", "outcome", "strategy", "op_id", "idempotency_key", "op_type",
            "remote_version", "resolution", "new_op_id", "detail",
        ):  # fmt: skip
            value = getattr(r, name)
            table.add_row(name, shown(value))
        for name in ("base", "local", "remote", "result"):
            value = json.dumps(getattr(r, name), indent=2, ensure_ascii=False)
            table.add_row(name, shown(value, multiline=True))
        table.add_row("recorded", time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.created_at)))
        out.print(table)


@app.command()
def resolve(
    file: QueueFile,
    conflict_id: ConflictId,
    keep: Annotated[
        str | None, typer.Option(help="local, remote or both (both: a conflicted copy).")
    ] = None,
    merged: Annotated[
        Path | None, typer.Option(help="A JSON file holding the merged value to send.")
    ] = None,
) -> None:
    """Decide a held conflict; the decision is sent as a new operation."""
    if (keep is None) == (merged is None):
        error("give exactly one of --keep or --merged")
        raise typer.Exit(2)
    if keep is not None and keep not in KEEPS[:3]:
        error(f"--keep must be local, remote or both, not {keep!r}")
        raise typer.Exit(2)
    value = None
    if merged is not None:
        try:
            value = json.loads(merged.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            error(f"cannot read {merged} as JSON: {exc}")
            raise typer.Exit(2) from exc
    with _open(file) as store:  # a PigeonError (e.g. not held): message, exit 1
        new = store.resolve(conflict_id, "merged" if merged else keep, value)  # type: ignore[arg-type]
        if new is None:
            out.print(
                f"conflict {conflict_id} resolved: the server's version stays; nothing to send"
            )
        else:
            out.print(
                f"conflict {conflict_id} resolved: operation {shown(new.id)} ({shown(new.type)} "
                f"{shown(new.entity)}, key {shown(new.idempotency_key)}) queued against version "
                f"{shown(new.base_version or '-')}"
            )

"""``pigeon queue``: inspect and repair an edge queue file.

Opening never creates a file and never moves in-flight operations: the app that owns the
queue may be running.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.live import Live
from rich.table import Table

from pigeon.cli._format import console, duration, error, shown, titled_table
from pigeon.cli.options import Finite
from pigeon.core.operation import Operation, OpStatus
from pigeon.edge.options import QueueOptions
from pigeon.edge.queue import OfflineQueue
from pigeon.edge.stats import QueueStats
from pigeon.exceptions import PigeonError
from pigeon.storage.crypto import Keyring
from pigeon.storage.errors import driver_errors

app = typer.Typer(help="Inspect and repair an offline queue file.", no_args_is_help=True)

QueueFile = Annotated[
    Path,
    typer.Option(
        "--file", "-f", envvar="PIGEON_QUEUE", help="The queue file ($PIGEON_QUEUE).",
        show_default=False,
    ),
]  # fmt: skip
OpId = Annotated[str, typer.Argument(help="Operation id, or its seq (see `pigeon queue list`).")]
# The statuses a row can have: OpStatus without COALESCED, which enqueue returns for an
# operation folded away and never stores (a test keeps the two in step).
StoredStatus = Literal["pending", "in_flight", "conflict", "delivered", "dead"]

out = console()


@contextlib.contextmanager
def open_queue(path: Path) -> Iterator[OfflineQueue]:
    """An existing queue file, as it is: no recovery of in-flight operations, and no
    schema upgrade (the app that owns the file may run an older pigeon, which would then
    refuse it). A missing, foreign, older or unwritable file, or any PigeonError raised in
    the ``with`` body, is a clear message and exit status 1."""
    try:
        keys = Keyring.from_env()  # PIGEON_KEYS / PIGEON_KEYS_FILE: a sealed queue's keys
        with OfflineQueue(path, QueueOptions.inspecting(), keys=keys) as queue:
            yield queue
    except PigeonError as exc:
        error(exc)
        raise typer.Exit(1) from exc
    except driver_errors() as exc:  # e.g. a read-only file: opening writes the state row
        error(f"cannot use {path}: {exc}")
        raise typer.Exit(1) from exc


def _op_id(queue: OfflineQueue, ref: str) -> str:
    """The id an argument names: an id, or the seq the list shows (a short handle)."""
    if ref.isdigit() and int(ref) < 2**63:  # a larger number is no seq (SQLite's int64)
        found = queue.store.op_id_by_seq(int(ref))
        if found is not None:
            return found
    return ref  # an id, or nothing: queue.get says "no operation ..." by name


def _status(op: Operation) -> str:
    """The status shown: "held" for a pending operation waiting behind its entity's dead
    head (never sent until that one is retried or discarded)."""
    return "held" if op.held else op.status.value


def _next_attempt(op: Operation, now: float) -> str:
    if op.status is not OpStatus.PENDING:  # in flight, held, delivered or dead: none due
        return "-"
    if op.held:
        return "after its entity's dead letter is retried or discarded"
    wait = op.next_attempt_at - now
    return "due now" if wait <= 0 else f"in {duration(wait)}"


def _table(title: str, ops: list[Operation]) -> Table:
    table = titled_table(shown(title))
    # Nothing no_wrap: at 80 columns the 36-character ids took the width and the other
    # headers came out a letter per line. The seq is a handle the commands also take.
    for column in ("seq", "id", "status", "type", "entity", "request", "attempts", "age"):
        table.add_column(column, overflow="fold", min_width=3 if column == "seq" else None)
    table.add_column("last error", overflow="fold")
    now = time.time()
    for op in ops:
        request = f"{op.method or ''} {op.endpoint or '(batch)'}".strip()
        table.add_row(
            str(op.seq),
            shown(op.id),
            _status(op),
            shown(op.type),
            shown(op.entity),
            shown(request),
            str(op.attempts),
            duration(now - op.created_at),
            shown(op.last_error),
        )
    return table


@app.command("list")
def list_(
    file: QueueFile,
    status: Annotated[
        StoredStatus | None, typer.Option(help="Only operations of this status.")
    ] = None,
    # min=0: a negative limit sliced rows off the end of the live list instead.
    limit: Annotated[int, typer.Option(min=0, help="At most this many rows.")] = 100,
) -> None:
    """Operations in queue order (by default the live ones: not delivered, not dead).
    An operation waiting behind its entity's dead letter shows as "held"."""
    with open_queue(file) as queue:
        # typer has checked status is one of StoredStatus
        ops = queue.operations(OpStatus(status), limit) if status else queue.pending[:limit]
        held = sum(op.held for op in ops)
        extra = f", {held} held behind a dead letter" if held else ""
        out.print(_table(f"{file}: {len(ops)} operation(s){extra}", ops))


@app.command()
def show(file: QueueFile, op_id: OpId) -> None:
    """Everything about one operation, its payload and its history of failures."""
    with open_queue(file) as queue:  # reports a PigeonError (e.g. no such id) and exits 1
        op = queue.get(_op_id(queue, op_id))
        table = titled_table(f"operation {shown(op.id)}", show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value", overflow="fold")
        for name in (
            "id", "idempotency_key", "status", "type", "entity", "method", "endpoint",
            "seq", "clock", "attempts", "last_error", "base_version",
        ):  # fmt: skip
            value = getattr(op, name)
            table.add_row(name, shown(value))
        table.add_row("created_at", time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(op.created_at)))
        table.add_row("held", "yes: behind its entity's dead letter" if op.held else "no")
        table.add_row("next attempt", _next_attempt(op, time.time()))
        payload = json.dumps(op.payload, indent=2, ensure_ascii=False)
        table.add_row("payload", shown(payload, multiline=True))
        for entry in op.history:
            table.add_row(
                shown(f"attempt {entry.get('attempt')}"),
                shown(f"{entry.get('kind')}: {entry.get('error')}"),
            )
        out.print(table)


@app.command()
def dead(file: QueueFile) -> None:
    """Dead letters: operations that will not be sent again unless retried."""
    with open_queue(file) as queue:
        ops = queue.dead_letters()
        out.print(_table(f"{file}: {len(ops)} dead letter(s)", ops))


def _repair(file: Path, op_id: str, verb: str) -> None:
    with open_queue(file) as queue:  # reports a PigeonError (e.g. not dead) and exits 1
        op_id = _op_id(queue, op_id)
        if verb == "retry":
            op = queue.retry_dead(op_id)
            out.print(f"{shown(op.id)} is pending again (same key {shown(op.idempotency_key)})")
        else:
            dropped = queue.discard(op_id, with_tail=verb == "discard-tail")
            also = f" with {len(dropped)} held operation(s) behind it" if dropped else ""
            out.print(f"{shown(op_id)} discarded{also}")


@app.command()
def retry(file: QueueFile, op_id: OpId) -> None:
    """Send a dead letter again, with its original idempotency key, in its own place:
    ahead of the operations of its entity held behind it."""
    _repair(file, op_id, "retry")


@app.command()
def discard(
    file: QueueFile,
    op_id: OpId,
    with_tail: Annotated[
        bool,
        typer.Option(
            "--with-tail",
            help="Also drop the operations of its entity held behind it (never sent).",
        ),
    ] = False,
) -> None:
    """Drop a dead letter (or a conflict-held operation) for good; the operations of its
    entity held behind it are sent next (or dropped too, with --with-tail)."""
    _repair(file, op_id, "discard-tail" if with_tail else "discard")


@app.command()
def purge(
    file: QueueFile,
    older_than: Annotated[
        float,
        typer.Option(
            "--older-than",
            click_type=Finite(min=0),
            help="Seconds since delivery.",
            show_default=False,
        ),
    ],
) -> None:
    """Forget operations delivered more than --older-than seconds ago, now (the queue also
    does it by itself after keep_delivered); nothing undelivered is ever purged."""
    with open_queue(file) as queue:
        purged = queue.purge_delivered(older_than)
    out.print(f"purged {purged} delivered operations older than {duration(older_than)}")


def _stats_table(title: str, s: QueueStats, rate: float | None) -> Table:
    table = titled_table(title, show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    rows: list[tuple[str, object]] = [
        ("depth", s.depth),
        ("oldest age", duration(s.oldest_age)),
        ("in flight", s.in_flight),
        ("conflicts", s.conflicts),
        ("dead letters", s.dead),
        ("held (behind a dead letter)", s.held),
        ("entities blocked", s.entities_blocked),
        ("delivered (kept)", s.delivered),
        ("sends saved by coalescing", s.coalesced),
        ("paused", s.paused or "no"),
    ]
    if rate is not None:
        rows.append(("delivery rate", f"{rate:.1f}/s"))
    for name, value in rows:
        table.add_row(name, shown(value))  # paused: the server's reason
    return table


@contextlib.contextmanager
def _metrics(queue: OfflineQueue, port: int | None, addr: str) -> Iterator[None]:
    """``--metrics-port``: the queue's figures served while the command runs."""
    if port is None:
        yield
        return
    from pigeon.ops.edge_metrics import serve_edge_metrics  # prometheus_client when asked

    try:
        server = serve_edge_metrics(queue, port, addr=addr)
    except OSError as exc:
        error(f"cannot serve metrics on {addr}:{port}: {exc}")
        raise typer.Exit(1) from exc
    # One line, flushed, before anything else: a supervisor (or a test) reads the port.
    print(f"metrics: http://{addr}:{server.port}/metrics", flush=True)
    with server:
        yield


@app.command()
def stats(
    file: QueueFile,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="A live view, refreshed until Ctrl-C.")
    ] = False,
    interval: Annotated[
        float,
        typer.Option(
            click_type=Finite(min=0.1, max=3600),
            help="Seconds between refreshes (--watch).",
        ),
    ] = 1.0,
    times: Annotated[
        int | None,
        typer.Option(min=1, help="With --watch: stop after this many refreshes."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="Also serve the figures for Prometheus at http://ADDR:PORT/metrics "
            "(pigeon.ops.edge_metrics) until Ctrl-C; 0 picks a free port.",
        ),
    ] = None,
    metrics_addr: Annotated[
        str, typer.Option(help="The address --metrics-port binds (loopback by default).")
    ] = "127.0.0.1",
) -> None:
    """Depth, oldest age, in flight, dead letters, operations held behind them, blocked
    entities, pause state; with
    --watch, a live view that adds the delivery rate (deliveries per second between
    refreshes; a purge of old deliveries between two refreshes reads as 0)."""
    title = shown(file)
    # With --metrics-port, Ctrl-C ends the serving cleanly whenever it comes after the
    # port's line, the table's printing included (it came as exit 130 there).
    serving: contextlib.AbstractContextManager[object] = (
        contextlib.nullcontext() if metrics_port is None else contextlib.suppress(KeyboardInterrupt)
    )
    with serving, open_queue(file) as queue, _metrics(queue, metrics_port, metrics_addr):
        if not watch:
            out.print(_stats_table(title, queue.stats(), None))
            if metrics_port is not None:  # serve until interrupted
                threading.Event().wait()
            return
        previous, at, shown_times = queue.stats(), time.monotonic(), 1
        with (
            contextlib.suppress(KeyboardInterrupt),
            Live(_stats_table(title, previous, None), console=out, auto_refresh=False) as live,
        ):
            while times is None or shown_times < times:
                time.sleep(interval)
                current, now = queue.stats(), time.monotonic()
                rate = max(0, current.delivered - previous.delivered) / (now - at)
                live.update(_stats_table(title, current, rate), refresh=True)
                previous, at, shown_times = current, now, shown_times + 1

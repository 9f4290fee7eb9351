"""``pigeon relay``: publish the server's outbox to a broker until stopped (SIGTERM or
Ctrl-C ends it after the pass in progress), or, with ``--once``, until it is empty."""

from __future__ import annotations

import logging
import signal
import sys
from typing import Annotated

import typer

from pigeon import logs
from pigeon.cli._db import open_db
from pigeon.cli.options import RELAY_TO_ENV, DbOption, Finite, KeysFileOption, load_keyring
from pigeon.cli.secrets import FILE_HELP, scrub, secret_url
from pigeon.exceptions import ConfigurationError
from pigeon.jobs.manager import describe
from pigeon.jobs.publishers import broker_kind, check_broker_url
from pigeon.jobs.relay import RelayRunner
from pigeon.jobs.stats import relay_lag

# typer shows help as rich markup, where "[/db]" is a closing tag: escaped by a backslash
# (a test reads every command's help as markup), written out, not by rich's escape(), so
# that running a command does not import rich (~45 M instructions).
TO_HELP = (
    r"Broker URL: redis://host[:port]\[/db] (Redis Streams), nats://host[:port] "
    r"(NATS JetStream) or amqp://user:pass@host[:port]\[/vhost] (RabbitMQ). With a "
    f"password: in ${RELAY_TO_ENV}, or {FILE_HELP}."
)


def checked_broker_url(url: str, command: str) -> str:
    """``url`` if the relay can use it; otherwise one line on stderr and exit 2."""
    try:
        check_broker_url(url)
    except ConfigurationError as exc:
        typer.echo(scrub(f"pigeon {command}: {exc}"), err=True)
        raise typer.Exit(2) from None
    return url


def make_runner(
    db: str,
    to: str,
    command: str,
    *,
    batch: int = 100,
    interval: float = 0.5,
    keys_file: str | None = None,
) -> RelayRunner:
    """A relay for ``db`` and ``to`` (not started); a URL or a missing client library
    the relay cannot use is one line on stderr and exit 2. Its keys (to open the sealed
    outbox): ``keys_file``, else PIGEON_KEYS / PIGEON_KEYS_FILE."""
    keyring = load_keyring(keys_file)
    try:
        return RelayRunner(db, to, batch=batch, interval=interval, keyring=keyring)
    except ConfigurationError as exc:
        typer.echo(scrub(f"pigeon {command}: {exc}"), err=True)
        raise typer.Exit(2) from None


def stop_before_exit_signals(runner: RelayRunner) -> None:
    """uvicorn ends a server stopped by SIGTERM / SIGINT by raising that signal again
    once it has shut down, with the handler that was there before it started: this is
    that handler, so the relay is stopped (its pass finished, its connections closed)
    before the process ends as it would have without it."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)

        def handler(signum: int, frame: object, previous: object = previous) -> None:
            runner.stop()
            signal.signal(signum, previous)  # type: ignore[arg-type]
            signal.raise_signal(signum)

        signal.signal(sig, handler)


def relay(
    db: DbOption,
    to: Annotated[
        str, typer.Option("--to", envvar=RELAY_TO_ENV, callback=secret_url, help=TO_HELP)
    ],
    batch: Annotated[int, typer.Option(min=1, help="Rows published per round.")] = 100,
    interval: Annotated[
        float,
        typer.Option(click_type=Finite(min=0.01), help="Seconds between looks at an empty outbox."),
    ] = 0.5,
    once: Annotated[
        bool,
        typer.Option(
            "--once", help="Publish what is pending and exit (1 if the broker refused a row)."
        ),
    ] = False,
    keys_file: KeysFileOption = None,
) -> None:
    """Publish the outbox in order, marking each row only after the broker confirmed it.

    At least once to the broker; Redis and NATS JetStream drop a re-publication by its
    message id, RabbitMQ consumers dedup on message_id. While the broker is down the relay
    backs off (capped, jittered) and resumes at the first unconfirmed row.
    """
    checked_broker_url(to, "relay")
    open_db(db).close()  # a missing file or an unreachable PostgreSQL: exit 2, named
    runner = make_runner(db, to, "relay", batch=batch, interval=interval, keys_file=keys_file)
    logs.configure("text", logging.INFO)  # redacted, as serve's and worker's logs are
    if once:
        if not runner.lock.acquire():
            typer.echo("pigeon relay: another relay is publishing this outbox", err=True)
            runner.stop()
            raise typer.Exit(1)
        published = runner.relay.drain()
        if runner.relay.last_error is not None:
            error = scrub(describe(runner.relay.last_error))
            typer.echo(
                f"pigeon relay: stopped at a row the broker did not confirm: {error}", err=True
            )
            lag = relay_lag(runner.db)
            typer.echo(f"published {published}, {lag.pending} pending")
            runner.stop()
            raise typer.Exit(1)
        counts = runner.relay.counts
        typer.echo(f"published {published} (broker dropped {counts.duplicates} repeats)")
        runner.stop()
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: runner.stop(timeout=0))
    typer.echo(f"pigeon relay: {broker_kind(to)} publisher running (Ctrl-C stops it)")
    sys.stdout.flush()
    runner.run_forever()

"""The options several commands share, each declared once as a typer ``Annotated`` alias.

A command writes ``db: DbOption`` and gets the same flag name, help and type as every
other command that takes it, so ``pigeon serve --help`` and ``pigeon worker --help`` cannot
drift apart on what ``--log-format`` or ``--relay-to`` means.
"""

from __future__ import annotations

from typing import Annotated

import typer

from pigeon.cli.secrets import FILE_HELP, secret_url
from pigeon.logs import REDACT_ENV, LogFormat

# The options that may carry a password take it from the environment or a file too
# (pigeon.cli.secrets): an argument is visible to every user of the machine.
DB_ENV = "PIGEON_DB"
RELAY_TO_ENV = "PIGEON_RELAY_TO"

DbOption = Annotated[
    str,
    typer.Option(
        "--db",
        envvar=DB_ENV,
        callback=secret_url,
        help=f"Server database: a SQLite path or postgresql://... (with a password: in "
        f"${DB_ENV}, or {FILE_HELP}).",
    ),
]

KeysFileOption = Annotated[
    str | None,
    typer.Option(
        "--keys-file",
        help="Key file (mode 0600; kid:base64key per line, newest first). Without it: "
        "PIGEON_KEYS or PIGEON_KEYS_FILE.",
    ),
]

# The logging options of the long-running commands (serve, worker): see pigeon.logs.
LogFormatOption = Annotated[
    LogFormat,
    typer.Option("--log-format", help="text, or json: one object a line (structured logs)."),
]
LogRedactOption = Annotated[
    list[str] | None,
    typer.Option(
        "--log-redact",
        help="A field name to redact from the logs besides the built-in list "
        f"(authorization, token, password, secret, payload, body, ...); repeatable; "
        f"${REDACT_ENV} takes a comma-separated list.",
    ),
]

# serve and worker each run a relay beside their own work; `pigeon relay` is the
# stand-alone form (its broker is the required --to).
RelayToOption = Annotated[
    str | None,
    typer.Option(
        "--relay-to",
        envvar=RELAY_TO_ENV,
        callback=secret_url,
        help="Also publish the outbox (e.g. /answers' announcements) to this broker "
        "(redis://, nats:// or amqp://) from a relay thread in this process, stopped "
        f"with it; as `pigeon relay --to` does. With a password: in ${RELAY_TO_ENV}, or "
        f"{FILE_HELP}.",
    ),
]

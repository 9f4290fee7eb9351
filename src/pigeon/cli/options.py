"""The options several commands share, each declared once as a typer ``Annotated`` alias.

A command writes ``db: DbOption`` and gets the same flag name, help and type as every
other command that takes it, so ``pigeon serve --help`` and ``pigeon worker --help`` cannot
drift apart on what ``--log-format`` or ``--relay-to`` means.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer._click.core import Context, Parameter
from typer._click.types import FLOAT, FloatRange

from pigeon.checks import is_finite
from pigeon.cli.secrets import FILE_HELP, secret_url
from pigeon.exceptions import ConfigurationError
from pigeon.logs import REDACT_ENV, LogFormat
from pigeon.storage.crypto import Keyring

# The options that may carry a password take it from the environment or a file too
# (pigeon.cli.secrets): an argument is visible to every user of the machine.
DB_ENV = "PIGEON_DB"
RELAY_TO_ENV = "PIGEON_RELAY_TO"


class Finite(FloatRange):
    """The type of every float option: a ``FloatRange`` (its min/max, if any) that also
    refuses NaN and the infinities, which the range lets through (every comparison with
    NaN is false; inf passes any minimum). Given as ``typer.Option(click_type=Finite())``;
    typer's own click, not the click package, since typer catches only its own errors."""

    name = "float"  # help shows <float> [x>=0.1], an error "... is not a valid float"

    def convert(self, value: Any, param: Parameter | None, ctx: Context | None) -> float:
        number = FLOAT.convert(value, param, ctx)
        if not is_finite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        bounded: float = super().convert(number, param, ctx)  # typed Any by typer's click
        return bounded

    def _describe_range(self) -> str:
        # Unbounded: no "[x<=None]" in the help (typer shows the range when not empty).
        if self.min is None and self.max is None:
            return ""
        return super()._describe_range()


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


def load_keyring(keys_file: str | None, param_hint: str = "--keys-file") -> Keyring | None:
    """The keyring of ``--keys-file``, else of the environment, else None; a usage error
    (exit 2, the reason named) for a key file or variable that cannot be used."""
    try:
        return Keyring.from_file(keys_file) if keys_file else Keyring.from_env()
    except ConfigurationError as exc:
        raise typer.BadParameter(str(exc), param_hint=param_hint) from exc


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

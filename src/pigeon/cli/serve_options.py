"""``pigeon serve``'s options: each declared once (flag, help, type), and read into the one
`ServerOptions` the server runs with (`options_from_cli`).

A value the server would refuse is a usage error here, naming the option it came from,
before any socket or file exists: found inside a worker it was a traceback after "serving
on", and with ``--workers N`` uvicorn restarted the crashing workers for ever.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from pigeon.cli._db import check_postgres
from pigeon.cli.options import Finite, load_keyring
from pigeon.cli.secrets import FILE_HELP, secret_token
from pigeon.core.imports import add_app_dir
from pigeon.exceptions import ConfigurationError
from pigeon.server.auth_options import AuthKind, AuthOptions
from pigeon.server.idempotency import IdempotencyPolicy
from pigeon.server.options import (
    MAX_IN_PROGRESS_WAIT,
    BodyLimits,
    ConnectionTimeouts,
    DatabaseOptions,
    IntakeOptions,
    ListenOptions,
    LogLevel,
    LogOptions,
    ServerOptions,
    SessionPolicy,
)
from pigeon.server.served import is_asgi_app, load_served
from pigeon.server.testhooks import ENV_KEY as TEST_HOOKS_KEY

# What pigeon serve serves without --app.
REFERENCE_APP = "pigeon.reference.notes:reference_app"

AppOption = Annotated[
    str,
    typer.Option(
        "--app",
        help="Your app as module:factory, a function taking the ServerOptions (every option "
        "below) and returning an ASGI app, e.g. create_app(Intake(options.open_db(), "
        "options.intake), options); or module:app, an ASGI app, which takes none of the "
        "app's options. The current directory is searched first (as uvicorn does). "
        "Default: the reference notes app.",
    ),
]
HostOption = Annotated[str, typer.Option(help="Interface to listen on.")]
PortOption = Annotated[
    int, typer.Option(min=0, max=65535, help="Port; 0 picks a free one (printed).")
]
WorkersOption = Annotated[int, typer.Option(min=1, help="Worker processes.")]
DurabilityOption = Annotated[str, typer.Option(help="SQLite synchronous: full or normal.")]
ClaimModeOption = Annotated[
    str,
    typer.Option(
        help="inline: the claim commits with the work (one commit); separate: the claim "
        "commits first. Either way a duplicate of a request in progress gets 409."
    ),
]
LockTimeoutOption = Annotated[
    float,
    typer.Option(
        click_type=Finite(),
        help="Seconds an in-progress claim left by a dead process blocks its key "
        "(separate claim mode); a retry after a crash runs within it.",
    ),
]
InProgressWaitOption = Annotated[
    float,
    typer.Option(
        click_type=Finite(min=0, max=MAX_IN_PROGRESS_WAIT),
        help="Seconds a duplicate of a request in progress waits for it and gets its "
        "response, before 409 + Retry-After. 0 (default): 409 at once (across "
        "processes on PostgreSQL: within 0.5 s).",
    ),
]
TestHooksOption = Annotated[
    bool,
    typer.Option(
        "--test-hooks",
        help="TESTS ONLY, loopback only: honour X-Pigeon-Test-Delay-Ms, "
        "X-Pigeon-Test-Fail and X-Pigeon-Test-Set-Cookie (pigeon.server.testhooks).",
    ),
]
ResponseRetentionOption = Annotated[
    float, typer.Option(click_type=Finite(), help="Seconds responses are kept.")
]
ClaimRetentionOption = Annotated[
    float, typer.Option(click_type=Finite(), help="Seconds keys are kept.")
]
AuthOption = Annotated[
    AuthKind,
    typer.Option(
        envvar="PIGEON_AUTH",
        help="demo: 'Bearer <principal>.<x>', NOT VERIFIED (loopback only unless "
        "--insecure); jwt: signed tokens, see the --jwt-* options.",
    ),
]
JwtSecretOption = Annotated[
    str | None,
    typer.Option(
        envvar="PIGEON_JWT_SECRET",
        callback=secret_token,
        help="HS256 secret, at least 32 bytes (prefer the environment variable or "
        f"{FILE_HELP}: arguments are visible to every user of the machine).",
        show_default=False,
    ),
]
JwtKeyFileOption = Annotated[
    list[Path] | None,
    typer.Option(
        envvar="PIGEON_JWT_KEY_FILE",
        metavar="FILE",
        help="PEM public key (RSA: RS256/PS256; EC P-256: ES256); repeat for several.",
    ),
]
JwksFileOption = Annotated[
    Path | None,
    typer.Option(envvar="PIGEON_JWKS_FILE", help="JWKS file; read again when it changes."),
]
JwtAudienceOption = Annotated[
    str | None, typer.Option(envvar="PIGEON_JWT_AUDIENCE", help="Required 'aud'.")
]
JwtIssuerOption = Annotated[
    str | None, typer.Option(envvar="PIGEON_JWT_ISSUER", help="Required 'iss'.")
]
JwtPrincipalClaimOption = Annotated[
    str,
    typer.Option(
        envvar="PIGEON_JWT_PRINCIPAL_CLAIM",
        help="Claim naming the principal, taken exactly (no case folding).",
    ),
]
JwtLeewayOption = Annotated[
    float,
    typer.Option(
        envvar="PIGEON_JWT_LEEWAY",
        click_type=Finite(),
        help="Seconds of clock skew forgiven on exp/nbf (<= 300).",
    ),
]
JwtMaxLifetimeOption = Annotated[
    float | None,
    typer.Option(
        envvar="PIGEON_JWT_MAX_LIFETIME",
        click_type=Finite(),
        help="Seconds a token may live at most: one whose exp is further than this "
        "from its iat or from now is refused (default: no bound).",
        show_default=False,
    ),
]
OperatorTokenOption = Annotated[
    str | None,
    typer.Option(
        envvar="PIGEON_OPERATOR_TOKEN",
        callback=secret_token,
        help="Operator credential (>= 16 characters), sent as 'Bearer <token>': it alone "
        f"reads the dashboard, the ledger and /metrics. Prefer the environment variable "
        f"or {FILE_HELP}.",
        show_default=False,
    ),
]
AllowAnonymousOption = Annotated[
    bool,
    typer.Option(
        "--allow-anonymous",
        help="Let requests without credentials in, all as the one user 'anonymous'.",
    ),
]
InsecureOption = Annotated[
    bool,
    typer.Option("--insecure", help="Listen on a non-loopback address with --auth demo anyway."),
]
RequireAuthOption = Annotated[
    bool, typer.Option(hidden=True, help="Kept for old scripts: now the default.")
]
MaxBodyOption = Annotated[
    int, typer.Option(min=1, help="Bytes of body one operation may have; more is 413.")
]
MaxBatchBodyOption = Annotated[
    int, typer.Option(min=1, help="Bytes of body a batch request may have; more is 413.")
]
LogLevelOption = Annotated[LogLevel, typer.Option(case_sensitive=False, help="uvicorn log level.")]
TimeoutIdleOption = Annotated[
    float,
    typer.Option(
        click_type=Finite(), help="Seconds a connection may wait for a request's first byte."
    ),
]
TimeoutHeadersOption = Annotated[
    float,
    typer.Option(click_type=Finite(), help="Seconds a request head may take to arrive; then 408."),
]
TimeoutBodyOption = Annotated[
    float,
    typer.Option(
        click_type=Finite(), help="Seconds a request body may take to arrive after its head."
    ),
]

DrainTimeoutOption = Annotated[
    float,
    typer.Option(
        click_type=Finite(min=0),
        help="Seconds the requests in flight at SIGTERM may take to finish; then they are "
        "cut off, nothing of them written, their keys free for the retry.",
    ),
]

_FIELD = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


@contextlib.contextmanager
def _usage_errors(names: Mapping[str, Any]) -> Iterator[None]:
    """A ConfigurationError as the usage error of the option to blame: its field, and any
    other option's name in the message, shown as the option (``--max-body``)."""
    try:
        yield
    except ConfigurationError as exc:
        message = _FIELD.sub(lambda m: _flag(m[0]) if m[0] in names else m[0], str(exc))
        hint = _flag(exc.field) if exc.field is not None and exc.field in names else None
        raise typer.BadParameter(message, param_hint=f"'{hint}'" if hint else None) from exc


def options_from_cli(args: Mapping[str, Any]) -> ServerOptions:
    """The server's options from the command's parsed ``args`` (its parameters by name),
    each value checked, or the usage error naming the option to blame."""
    with _usage_errors(args):
        options = ServerOptions(
            database=DatabaseOptions(
                _absolute_db(args["db"]), args["durability"], _absolute(args["keys_file"])
            ),
            intake=IntakeOptions(
                IdempotencyPolicy(
                    args["lock_timeout"], args["response_retention"], args["claim_retention"]
                ),
                claim_mode=args["claim_mode"],
                in_progress_wait=args["in_progress_wait"],
                test_hooks=args["test_hooks"],
            ),
            limits=BodyLimits(args["max_body"], args["max_batch_body"]),
            auth=_auth(args),
            sessions=SessionPolicy.from_env(),  # the page's session lifetimes
            listen=ListenOptions(
                args["host"],
                args["port"],
                args["workers"],
                args["insecure"],
                ConnectionTimeouts(
                    args["timeout_idle"], args["timeout_headers"], args["timeout_body"]
                ),
                args["drain_timeout"],
            ),
            logs=LogOptions(args["log_level"], args["log_format"], tuple(args["log_redact"] or ())),
            relay_to=args["relay_to"],
            app=args["app"],
        )
        options.auth.authenticator()  # key files readable, secret long enough, in range
    _check_app(options)
    _check_environment(options)
    return options


def _check_app(options: ServerOptions) -> None:
    """The app ``--app`` names: importable, and a factory or an ASGI app; an ASGI app
    only without the options it could not take (it was made before any option was)."""
    assert options.app is not None
    add_app_dir(".")  # --app myapp:make finds ./myapp.py, as pigeon worker and uvicorn do
    try:
        found = load_served(options.app)
    except ConfigurationError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--app'") from exc
    unheeded = _app_options_given(options) if is_asgi_app(found) else []
    if unheeded:
        raise typer.BadParameter(
            f"{options.app} is an ASGI app, made before any option: it cannot take "
            f"{', '.join(unheeded)}. Make it a factory, def make(options: ServerOptions) "
            "returning the app, to have them",
            param_hint="'--app'",
        )


def _app_options_given(options: ServerOptions) -> list[str]:
    """The options that shape an app (the intake's, the limits, who may call what) given
    other values than their defaults, as flags."""
    default = ServerOptions(auth=AuthOptions(allow_anonymous=False))  # the command's
    parts = [
        (options.intake.policy, default.intake.policy),
        (options.intake, default.intake),
        (options.limits, default.limits),
        (options.auth, default.auth),
    ]
    given = [
        field.name
        for part, usual in parts
        for field in dataclasses.fields(part)  # type: ignore[arg-type]
        if field.name != "policy" and getattr(part, field.name) != getattr(usual, field.name)
    ]
    return [_flag(name.removesuffix("s") if name == "jwt_key_files" else name) for name in given]


def _auth(args: Mapping[str, Any]) -> AuthOptions:
    if args["require_auth"] and args["allow_anonymous"]:
        raise typer.BadParameter("--require-auth and --allow-anonymous contradict each other")
    return AuthOptions(
        auth=args["auth"],
        jwt_secret=args["jwt_secret"],
        jwt_key_files=tuple(p.resolve() for p in args["jwt_key_file"] or ()),
        jwks_file=args["jwks_file"].resolve() if args["jwks_file"] else None,
        jwt_audience=args["jwt_audience"],
        jwt_issuer=args["jwt_issuer"],
        jwt_principal_claim=args["jwt_principal_claim"],
        jwt_leeway=args["jwt_leeway"],
        jwt_max_lifetime=args["jwt_max_lifetime"],
        operator_token=args["operator_token"],
        allow_anonymous=args["allow_anonymous"],
    )


def _check_environment(options: ServerOptions) -> None:
    """What the options alone cannot tell: the test hooks' second key, a key file or
    variable the workers could not use, a broker URL, a PostgreSQL server that answers."""
    if options.intake.test_hooks and os.environ.get(TEST_HOOKS_KEY) != "1":
        raise typer.BadParameter(
            f"--test-hooks also needs {TEST_HOOKS_KEY}=1 in the environment: a second key, "
            "so that the option alone never turns the fault switch on",
            param_hint="'--test-hooks'",
        )
    if options.relay_to is not None:
        # The relay (pigeon.jobs, ~0.1 s of imports) loads only when --relay-to asks for it.
        from pigeon.cli.relay_cmd import checked_broker_url

        checked_broker_url(options.relay_to, "serve")
    assert options.database is not None
    load_keyring(options.database.keys_file)  # refused now, not in every worker
    if options.database.is_postgres:  # unreachable: libpq's reason within seconds
        check_postgres(options.database.url)


def _absolute_db(db: str) -> str:
    """A PostgreSQL URL as it is; a SQLite path made absolute, as every process reads it."""
    return db if db.startswith(("postgresql://", "postgres://")) else os.path.abspath(db)


def _absolute(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None

"""``pigeon serve``: the reference notes server (idempotent intake) under uvicorn.

With one worker (the default) the server runs in this very process, so a SIGKILL of the
printed pid kills the server and nothing else: what the crash tests rely on. With
``--workers N`` uvicorn's supervisor forks N processes that share the listening socket;
each worker asks the kernel to kill it when the supervisor dies (Linux), so a SIGKILL of
the supervisor does not leave orphans holding the database.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer
import uvicorn
from starlette.applications import Starlette

from pigeon import lifecycle, logs
from pigeon.checks import is_finite
from pigeon.cli._db import check_postgres, is_postgres
from pigeon.cli.keys_cmd import load_keyring
from pigeon.cli.options import (
    DbOption,
    KeysFileOption,
    LogFormatOption,
    LogRedactOption,
    RelayToOption,
)
from pigeon.cli.relay_cmd import checked_broker_url, make_runner, stop_before_exit_signals
from pigeon.cli.secrets import FILE_HELP, scrub, secret_token
from pigeon.cli.serve_auth import AuthKind, AuthOptions, is_loopback
from pigeon.exceptions import ConfigurationError, StoreError
from pigeon.ops.session import SessionPolicy
from pigeon.orphans import die_with_parent, watch_parent
from pigeon.reference.notes import create_notes_app
from pigeon.reference.schema import attach as attach_reference
from pigeon.server import memory
from pigeon.server.idempotency import DAY, IdempotencyPolicy
from pigeon.server.intake import MAX_IN_PROGRESS_WAIT, ClaimMode
from pigeon.server.limits import DEFAULT_MAX_BATCH_BODY, DEFAULT_MAX_BODY, checked_limits
from pigeon.server.testhooks import ENV_KEY as TEST_HOOKS_KEY
from pigeon.server.timeouts import DEFAULT_BODY, DEFAULT_HEADERS, DEFAULT_IDLE, ConnectionTimeouts
from pigeon.storage.crypto import Keyring
from pigeon.storage.server import open_server_db
from pigeon.storage.sqlite import Durability

log = logging.getLogger("pigeon.serve")
_ENV = "PIGEON_SERVE_"
TIMED_PROTOCOL = "pigeon.server.timeouts:TimedH11Protocol"
REFERENCE_LWW = ("lww-notes",)  # last-write-wins by hybrid logical clock
REFERENCE_CRDT = ("docs",)  # Yjs documents merged on the server
# uvicorn's own level names (uvicorn.config.LOG_LEVELS; a test keeps the two equal). A
# name outside them was a KeyError traceback from uvicorn.Config, after the file was made.
LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]


def app_from_env() -> Starlette:
    """The uvicorn factory for worker processes: settings come through the environment."""
    _die_with_parent()
    memory.configure_malloc()  # request-sized buffers are given back when freed
    env = os.environ
    durability: Durability = "normal" if env.get(_ENV + "DURABILITY") == "normal" else "full"
    keys_file = env.get(_ENV + "KEYS_FILE")  # --keys-file, else PIGEON_KEYS(_FILE)
    keyring = Keyring.from_file(keys_file) if keys_file else Keyring.from_env()
    db = open_server_db(env[_ENV + "DB"], durability=durability, keyring=keyring)
    claim_mode: ClaimMode = "separate" if env.get(_ENV + "CLAIM_MODE") == "separate" else "inline"
    return create_notes_app(
        db,
        policy=IdempotencyPolicy(
            lock_timeout=float(env.get(_ENV + "LOCK_TIMEOUT", "10")),
            response_retention=float(env.get(_ENV + "RESPONSE_RETENTION", str(DAY))),
            claim_retention=float(env.get(_ENV + "CLAIM_RETENTION", str(30 * DAY))),
        ),
        claim_mode=claim_mode,
        **AuthOptions.from_env(env).app_options(),
        # The reference server shows every conflict strategy the server settles itself.
        lww_collections=REFERENCE_LWW,
        crdt_collections=REFERENCE_CRDT,
        max_body=int(env.get(_ENV + "MAX_BODY", str(DEFAULT_MAX_BODY))),
        max_batch_body=int(env.get(_ENV + "MAX_BATCH_BODY", str(DEFAULT_MAX_BATCH_BODY))),
        in_progress_wait=float(env.get(_ENV + "IN_PROGRESS_WAIT", "0")),
        test_hooks=env.get(_ENV + "TEST_HOOKS") == "1",
    )


def _die_with_parent() -> None:
    """A uvicorn worker ends with its supervisor (pigeon.orphans): SIGTERM, uvicorn's
    graceful shutdown, when the kernel reports the supervisor's death (uvicorn starts
    its workers from its main thread), and from a watching thread everywhere."""
    if os.environ.get(_ENV + "SUPERVISED") != "1":
        return
    supervisor = int(os.environ[_ENV + "SUPERVISOR"])
    die_with_parent(supervisor, signal.SIGTERM)
    watch_parent(supervisor, signal.SIGTERM)


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket whose ``proto`` says TCP.

    asyncio sets TCP_NODELAY on accepted connections only when the listening socket's
    proto is IPPROTO_TCP; uvicorn's own ``bind_socket`` leaves it 0, and then every
    response waits out Nagle + delayed ACK (about 40 ms per request on loopback).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:  # OverflowError: a port outside 0-65535
        sock.close()
        raise typer.BadParameter(f"cannot listen on {host}:{port}: {exc}") from exc
    sock.set_inheritable(True)
    return sock


def checked_policy(
    lock_timeout: float, response_retention: float, claim_retention: float
) -> IdempotencyPolicy:
    """The policy each uvicorn worker builds from the environment, built here first.

    Refused values were only found inside the worker: a traceback after "serving on",
    and with ``--workers N`` uvicorn restarted the crashing workers for ever. Here they
    are a usage error before any socket or file exists.
    """
    options = (
        ("--lock-timeout", lock_timeout),
        ("--response-retention", response_retention),
        ("--claim-retention", claim_retention),
    )
    for option, value in options:
        # The policy passes an infinite lifetime (inf <= inf), which would reach stored
        # expiry times and Retry-After arithmetic; nan is caught here too, so that the
        # message names the option it came from.
        if not is_finite(value):
            raise typer.BadParameter(
                f"{value} is not a finite number of seconds", param_hint=f"'{option}'"
            )
    try:
        return IdempotencyPolicy(lock_timeout, response_retention, claim_retention)
    except ConfigurationError as exc:
        hint = " / ".join(f"'{option}'" for option, _ in options)
        raise typer.BadParameter(str(exc), param_hint=hint) from exc


def serve(
    db: DbOption,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port; 0 picks a free one (printed).")
    ] = 8765,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
    durability: Annotated[str, typer.Option(help="SQLite synchronous: full or normal.")] = "full",
    claim_mode: Annotated[
        str,
        typer.Option(
            help="inline: the claim commits with the work (one commit); separate: the claim "
            "commits first. Either way a duplicate of a request in progress gets 409."
        ),
    ] = "inline",
    lock_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds an in-progress claim left by a dead process blocks its key "
            "(separate claim mode); a retry after a crash runs within it."
        ),
    ] = 10,
    in_progress_wait: Annotated[
        float,
        typer.Option(
            min=0,
            max=MAX_IN_PROGRESS_WAIT,
            help="Seconds a duplicate of a request in progress waits for it and gets its "
            "response, before 409 + Retry-After. 0 (default): 409 at once (across "
            "processes on PostgreSQL: within 0.5 s).",
        ),
    ] = 0.0,
    test_hooks: Annotated[
        bool,
        typer.Option(
            "--test-hooks",
            help="TESTS ONLY, loopback only: honour X-Pigeon-Test-Delay-Ms, "
            "X-Pigeon-Test-Fail and X-Pigeon-Test-Set-Cookie (pigeon.server.testhooks).",
        ),
    ] = False,
    response_retention: Annotated[float, typer.Option(help="Seconds responses are kept.")] = DAY,
    claim_retention: Annotated[float, typer.Option(help="Seconds keys are kept.")] = 30 * DAY,
    auth: Annotated[
        AuthKind,
        typer.Option(
            envvar="PIGEON_AUTH",
            help="demo: 'Bearer <principal>.<x>', NOT VERIFIED (loopback only unless "
            "--insecure); jwt: signed tokens, see the --jwt-* options.",
        ),
    ] = "demo",
    jwt_secret: Annotated[
        str | None,
        typer.Option(
            envvar="PIGEON_JWT_SECRET",
            callback=secret_token,
            help="HS256 secret, at least 32 bytes (prefer the environment variable or "
            f"{FILE_HELP}: arguments are visible to every user of the machine).",
            show_default=False,
        ),
    ] = None,
    jwt_key_file: Annotated[
        list[Path] | None,
        typer.Option(
            envvar="PIGEON_JWT_KEY_FILE",
            metavar="FILE",
            help="PEM public key (RSA: RS256/PS256; EC P-256: ES256); repeat for several.",
        ),
    ] = None,
    jwks_file: Annotated[
        Path | None,
        typer.Option(envvar="PIGEON_JWKS_FILE", help="JWKS file; read again when it changes."),
    ] = None,
    jwt_audience: Annotated[
        str | None, typer.Option(envvar="PIGEON_JWT_AUDIENCE", help="Required 'aud'.")
    ] = None,
    jwt_issuer: Annotated[
        str | None, typer.Option(envvar="PIGEON_JWT_ISSUER", help="Required 'iss'.")
    ] = None,
    jwt_principal_claim: Annotated[
        str,
        typer.Option(
            envvar="PIGEON_JWT_PRINCIPAL_CLAIM",
            help="Claim naming the principal, taken exactly (no case folding).",
        ),
    ] = "sub",
    jwt_leeway: Annotated[
        float,
        typer.Option(
            envvar="PIGEON_JWT_LEEWAY", help="Seconds of clock skew forgiven on exp/nbf (<= 300)."
        ),
    ] = 30.0,
    jwt_max_lifetime: Annotated[
        float | None,
        typer.Option(
            envvar="PIGEON_JWT_MAX_LIFETIME",
            help="Seconds a token may live at most: one whose exp is further than this "
            "from its iat or from now is refused (default: no bound).",
            show_default=False,
        ),
    ] = None,
    operator_token: Annotated[
        str | None,
        typer.Option(
            envvar="PIGEON_OPERATOR_TOKEN",
            callback=secret_token,
            help="Operator credential (>= 16 characters), sent as 'Bearer <token>': it alone "
            f"reads the dashboard, the ledger and /metrics. Prefer the environment variable "
            f"or {FILE_HELP}.",
            show_default=False,
        ),
    ] = None,
    allow_anonymous: Annotated[
        bool,
        typer.Option(
            "--allow-anonymous",
            help="Let requests without credentials in, all as the one user 'anonymous'.",
        ),
    ] = False,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure", help="Listen on a non-loopback address with --auth demo anyway."
        ),
    ] = False,
    require_auth: Annotated[
        bool, typer.Option(hidden=True, help="Kept for old scripts: now the default.")
    ] = False,
    max_body: Annotated[
        int, typer.Option(min=1, help="Bytes of body one operation may have; more is 413.")
    ] = DEFAULT_MAX_BODY,
    max_batch_body: Annotated[
        int, typer.Option(min=1, help="Bytes of body a batch request may have; more is 413.")
    ] = DEFAULT_MAX_BATCH_BODY,
    log_level: Annotated[
        LogLevel, typer.Option(case_sensitive=False, help="uvicorn log level.")
    ] = "warning",
    timeout_idle: Annotated[
        float, typer.Option(help="Seconds a connection may wait for a request's first byte.")
    ] = DEFAULT_IDLE,
    timeout_headers: Annotated[
        float, typer.Option(help="Seconds a request head may take to arrive; then 408.")
    ] = DEFAULT_HEADERS,
    timeout_body: Annotated[
        float, typer.Option(help="Seconds a request body may take to arrive after its head.")
    ] = DEFAULT_BODY,
    log_format: LogFormatOption = "text",
    log_redact: LogRedactOption = None,
    relay_to: RelayToOption = None,
    keys_file: KeysFileOption = None,
) -> None:
    """Run the reference notes server with the idempotent intake.

    Anonymous callers: refused (401) unless --allow-anonymous, and then they all
    act as ONE user, 'anonymous', sharing its notes, records and keys.

    --auth demo (the default) trusts 'Bearer <principal>.<x>' without checking
    it and listens on loopback only; use --auth jwt where others can connect.
    The dashboard, the ledger and /metrics answer only to --operator-token.
    """
    if durability not in ("full", "normal"):
        raise typer.BadParameter("durability must be 'full' or 'normal'")
    if claim_mode not in ("inline", "separate"):
        raise typer.BadParameter("claim-mode must be 'inline' or 'separate'")
    try:  # the app's own check, before any worker builds it
        checked_limits(max_body, max_batch_body, names=("--max-body", "--max-batch-body"))
    except ConfigurationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    checked_policy(lock_timeout, response_retention, claim_retention)
    if relay_to is not None:
        checked_broker_url(relay_to, "serve")
    if test_hooks:
        _check_test_hooks(host)
    if require_auth and allow_anonymous:
        raise typer.BadParameter("--require-auth and --allow-anonymous contradict each other")
    access = AuthOptions(
        auth=auth,
        jwt_secret=jwt_secret,
        jwt_key_files=tuple(jwt_key_file or ()),
        jwks_file=jwks_file,
        jwt_audience=jwt_audience,
        jwt_issuer=jwt_issuer,
        jwt_principal_claim=jwt_principal_claim,
        jwt_leeway=jwt_leeway,
        jwt_max_lifetime=jwt_max_lifetime,
        operator_token=operator_token,
        allow_anonymous=allow_anonymous,
    )
    try:  # before any socket or file exists, as the policy's own checks
        access.check(host, insecure=insecure)
        SessionPolicy.from_env()  # the page's session lifetimes, which each worker reads
    except ConfigurationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    try:
        timeouts = ConnectionTimeouts(timeout_idle, timeout_headers, timeout_body)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--timeout-*'") from exc
    load_keyring(keys_file)  # a key file or variable the workers could not use: refused now
    if is_postgres(db):  # an unreachable server: libpq's reason within seconds, not a pool's
        check_postgres(db)
    settings = {
        # A PostgreSQL URL is passed as is; a SQLite path is made absolute for the workers.
        "DB": db if db.startswith(("postgresql://", "postgres://")) else os.path.abspath(db),
        "DURABILITY": durability,
        "CLAIM_MODE": claim_mode,
        "LOCK_TIMEOUT": str(lock_timeout),
        "RESPONSE_RETENTION": str(response_retention),
        "CLAIM_RETENTION": str(claim_retention),
        "MAX_BODY": str(max_body),
        "MAX_BATCH_BODY": str(max_batch_body),
        "IN_PROGRESS_WAIT": str(in_progress_wait),
        "TEST_HOOKS": "1" if test_hooks else "0",
        "SUPERVISED": "1" if workers > 1 else "0",
        "SUPERVISOR": str(os.getpid()),
        "KEYS_FILE": os.path.abspath(keys_file) if keys_file else "",
    }
    # The workers build their app from the environment (`app_from_env`).
    os.environ.update(timeouts.environ())  # read by each worker's connections
    os.environ.update({_ENV + k: v for k, v in settings.items()})
    os.environ.update(access.to_env())
    sock = _bind_and_open(host, port, settings["DB"], durability)
    config = uvicorn.Config(
        "pigeon.cli.serve_cmd:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        # pigeon's formatter (text or JSON, redacted) for uvicorn's loggers and the app's,
        # set up again by uvicorn in every worker process it starts.
        log_config=logs.dict_config(log_format, log_level.upper(), log_redact or ()),
        timeout_graceful_shutdown=5,
        # uvicorn's h11 protocol with deadlines for idle connections, request heads and
        # bodies (pigeon.server.timeouts); its own keep-alive timeout is the idle one.
        http=TIMED_PROTOCOL,
        timeout_keep_alive=max(1, round(timeouts.idle)),
    )
    _announce(sock, test_hooks)
    relay = (settings["DB"], relay_to, keys_file) if relay_to else None
    _run(config, sock, settings["DB"], relay)


def _check_test_hooks(host: str) -> None:
    """``--test-hooks`` needs a loopback host and its second key in the environment."""
    if not is_loopback(host):
        raise typer.BadParameter(
            f"--test-hooks lets any client delay and fail requests at will: it is for tests "
            f"on a loopback address only, not {host!r}",
            param_hint="'--test-hooks'",
        )
    if os.environ.get(TEST_HOOKS_KEY) != "1":
        raise typer.BadParameter(
            f"--test-hooks also needs {TEST_HOOKS_KEY}=1 in the environment: a second key, "
            "so that the option alone never turns the fault switch on",
            param_hint="'--test-hooks'",
        )


def _run(
    config: uvicorn.Config,
    sock: socket.socket,
    db: str,
    relay: tuple[str, str, str | None] | None,
) -> None:
    """uvicorn on ``sock`` until it stops, in this process or under its supervisor of
    ``config.workers`` processes (a worker it replaces is counted in ``db``); with
    ``relay`` (db, broker, keys file) a relay beside it.

    The relay runs in this process (uvicorn's workers are spawned, not forked), on its
    own connection, and stops after the server did."""
    runner = None
    if relay is not None:
        relay_db, broker, keys_file = relay
        runner = make_runner(relay_db, broker, "serve", keys_file=keys_file).start()
        stop_before_exit_signals(runner)
    try:
        if config.workers > 1:
            _Supervisor(config, sockets=[sock], db=db).run()
        else:
            uvicorn.Server(config).run(sockets=[sock])
    finally:
        if runner is not None:
            runner.stop()


class _Supervisor(uvicorn.supervisors.Multiprocess):
    """uvicorn's supervisor of ``--workers N``, saying at WARNING (``pigeon serve``'s
    default level; uvicorn says it at INFO) when it replaces a worker that died, and
    counting it in the database (``pigeon.lifecycle``: ``/metrics`` reads it there)."""

    def __init__(self, config: uvicorn.Config, sockets: list[socket.socket], db: str) -> None:
        super().__init__(config, sockets=sockets)
        self.db = db

    def keep_subprocess_alive(self) -> None:
        before = list(self.processes)
        super().keep_subprocess_alive()
        for old, new in zip(before, self.processes, strict=False):
            if new is not old:
                log.warning(
                    "pigeon serve: worker %s died (exit code %s); replaced by worker %s",
                    old.pid,
                    old.exitcode,
                    new.pid,
                )
                lifecycle.count_event_at(
                    self.db, lifecycle.SERVE_WORKER_REPLACED, lifecycle.event_origin(old.pid)
                )


def _bind_and_open(host: str, port: int, db: str, durability: str) -> socket.socket:
    """The listening socket, then the database opened (and migrated) once and closed.

    Bound first: a refused address or port must not leave a new database file behind.
    Opened here: a bad file fails now, with its message, not in every worker."""
    sock = listen_socket(host, port)
    durable: Durability = "full" if durability == "full" else "normal"
    try:
        database = open_server_db(db, durability=durable)
        try:
            attach_reference(database)  # the reference app's own tables (its schema component)
        finally:
            database.close()
    except StoreError as exc:
        sock.close()
        typer.echo(scrub(f"pigeon serve: {exc}"), err=True)
        raise typer.Exit(2) from exc
    return sock


def _announce(sock: socket.socket, test_hooks: bool) -> None:
    """The "serving on" line (what scripts and tests wait for), after a loud warning when
    the test hooks are on."""
    bound_host, bound_port = sock.getsockname()[:2]
    if test_hooks:
        typer.secho(
            "WARNING: --test-hooks is on: any client may delay and fail requests with "
            "X-Pigeon-Test-* headers. For tests only.",
            err=True,
            fg=typer.colors.RED,
            bold=True,
        )
    typer.echo(f"pigeon serving on http://{bound_host}:{bound_port} (pid {os.getpid()})")
    sys.stdout.flush()

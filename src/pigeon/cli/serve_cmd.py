"""``pigeon serve``: an app with the idempotent intake under uvicorn, the user's own
(``--app module:factory``, `pigeon.server.served`) or the reference notes app.

The command reads its options once into a `ServerOptions` (`pigeon.cli.serve_options`) and
every process that serves gets that same object: uvicorn pickles its configuration, whose
app factory holds it, into each worker process it starts (through the pipe that starts
the process: no environment variable, no file).

With one worker (the default) the server runs in this very process, so a SIGKILL of the
printed pid kills the server and nothing else: what the crash tests rely on. With
``--workers N`` uvicorn's supervisor starts N processes, each listening on the bound
address (`pigeon.cli.listeners`: on Linux a socket each, the kernel spreading connections);
each worker asks the kernel to kill it when the supervisor dies (Linux), so a SIGKILL of
the supervisor does not leave orphans holding the database.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import socket
import sys

import typer
import uvicorn
from starlette.types import ASGIApp
from uvicorn.config import STARTUP_FAILURE

from pigeon import lifecycle, logs
from pigeon.cli.listeners import listen_socket, worker_sockets
from pigeon.cli.options import (
    DbOption,
    KeysFileOption,
    LogFormatOption,
    LogRedactOption,
    RelayToOption,
)
from pigeon.cli.secrets import scrub
from pigeon.cli.serve_options import (
    REFERENCE_APP,
    AllowAnonymousOption,
    AppOption,
    AuthOption,
    ClaimModeOption,
    ClaimRetentionOption,
    DrainTimeoutOption,
    DurabilityOption,
    HostOption,
    InProgressWaitOption,
    InsecureOption,
    JwksFileOption,
    JwtAudienceOption,
    JwtIssuerOption,
    JwtKeyFileOption,
    JwtLeewayOption,
    JwtMaxLifetimeOption,
    JwtPrincipalClaimOption,
    JwtSecretOption,
    LockTimeoutOption,
    LogLevelOption,
    MaxBatchBodyOption,
    MaxBodyOption,
    OperatorTokenOption,
    PortOption,
    RequireAuthOption,
    ResponseRetentionOption,
    TestHooksOption,
    TimeoutBodyOption,
    TimeoutHeadersOption,
    TimeoutIdleOption,
    WorkersOption,
    options_from_cli,
)
from pigeon.exceptions import ConfigurationError, StoreError
from pigeon.orphans import die_with_parent, watch_parent
from pigeon.reference.schema import attach as attach_reference
from pigeon.server import memory
from pigeon.server.idempotency import DAY
from pigeon.server.limits import DEFAULT_MAX_BATCH_BODY, DEFAULT_MAX_BODY
from pigeon.server.options import (
    DEFAULT_BODY,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_HEADERS,
    DEFAULT_IDLE,
    ServerOptions,
)
from pigeon.server.served import build_served
from pigeon.server.timeouts import TimedConfig
from pigeon.storage.server import open_server_db

log = logging.getLogger("pigeon.serve")


def serve(
    db: DbOption,
    app: AppOption = REFERENCE_APP,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8765,
    workers: WorkersOption = 1,
    durability: DurabilityOption = "full",
    claim_mode: ClaimModeOption = "inline",
    lock_timeout: LockTimeoutOption = 10.0,
    in_progress_wait: InProgressWaitOption = 0.0,
    test_hooks: TestHooksOption = False,
    response_retention: ResponseRetentionOption = DAY,
    claim_retention: ClaimRetentionOption = 30 * DAY,
    auth: AuthOption = "demo",
    jwt_secret: JwtSecretOption = None,
    jwt_key_file: JwtKeyFileOption = None,
    jwks_file: JwksFileOption = None,
    jwt_audience: JwtAudienceOption = None,
    jwt_issuer: JwtIssuerOption = None,
    jwt_principal_claim: JwtPrincipalClaimOption = "sub",
    jwt_leeway: JwtLeewayOption = 30.0,
    jwt_max_lifetime: JwtMaxLifetimeOption = None,
    operator_token: OperatorTokenOption = None,
    allow_anonymous: AllowAnonymousOption = False,
    insecure: InsecureOption = False,
    require_auth: RequireAuthOption = False,
    max_body: MaxBodyOption = DEFAULT_MAX_BODY,
    max_batch_body: MaxBatchBodyOption = DEFAULT_MAX_BATCH_BODY,
    log_level: LogLevelOption = "warning",
    timeout_idle: TimeoutIdleOption = DEFAULT_IDLE,
    timeout_headers: TimeoutHeadersOption = DEFAULT_HEADERS,
    timeout_body: TimeoutBodyOption = DEFAULT_BODY,
    drain_timeout: DrainTimeoutOption = DEFAULT_DRAIN_TIMEOUT,
    log_format: LogFormatOption = "text",
    log_redact: LogRedactOption = None,
    relay_to: RelayToOption = None,
    keys_file: KeysFileOption = None,
) -> None:
    """Serve an app with the idempotent intake: yours (--app) or the reference notes app.

    Anonymous callers: refused (401) unless --allow-anonymous, and then they all
    act as ONE user, 'anonymous', sharing its notes, records and keys.

    --auth demo (the default) trusts 'Bearer <principal>.<x>' without checking
    it and listens on loopback only; use --auth jwt where others can connect.
    The dashboard, the ledger and /metrics answer only to --operator-token.
    """
    # Every parameter by name (nothing else is bound yet): read once, into the options.
    run_server(options_from_cli(locals()))


def run_server(options: ServerOptions) -> None:
    """Listen, open the database once, build the app, say so, and serve until stopped."""
    sock = _bind_and_open(options)
    config = _config(options)
    if options.listen.workers == 1:
        _load(config, sock)
    _announce(sock, options)
    _run(config, sock, options)


def served_app(options: ServerOptions, supervisor: int | None = None) -> ASGIApp:
    """The app a serving process runs: uvicorn's factory, called in this process with one
    worker and in each worker process with several (``supervisor``: their parent's pid)."""
    if supervisor is not None:
        # A worker ends with its supervisor (pigeon.orphans): SIGTERM, uvicorn's graceful
        # shutdown, when the kernel reports the supervisor's death (uvicorn starts its
        # workers from its main thread), and from a watching thread everywhere.
        die_with_parent(supervisor, signal.SIGTERM)
        watch_parent(supervisor, signal.SIGTERM)
    memory.configure_malloc()  # request-sized buffers are given back when freed
    memory.configure_gc()  # the collector not run several times a batch
    try:
        return build_served(options.app or REFERENCE_APP, options)
    except ConfigurationError as exc:
        if supervisor is None:
            raise  # this process: said in one line before "serving on" (_load)
        # A worker: one line, and the exit code on which uvicorn's supervisor stops
        # instead of starting the worker again for ever.
        log.error("pigeon serve: %s", exc)
        sys.exit(STARTUP_FAILURE)


def _config(options: ServerOptions) -> TimedConfig:
    listen, logged = options.listen, options.logs
    supervisor = os.getpid() if listen.workers > 1 else None
    return TimedConfig(
        functools.partial(served_app, options, supervisor),
        factory=True,
        timeouts=listen.timeouts,  # uvicorn's h11 protocol with deadlines (server.timeouts)
        host=listen.host,
        port=listen.port,
        workers=listen.workers,
        log_level=logged.level,
        # pigeon's formatter (text or JSON, redacted) for uvicorn's loggers and the app's,
        # set up again by uvicorn in every worker process it starts.
        log_config=logs.dict_config(logged.format, logged.level.upper(), logged.redact),
        timeout_graceful_shutdown=listen.drain_timeout,
    )


def _load(config: TimedConfig, sock: socket.socket) -> None:
    """The app built in this process before it says "serving on": a failure is one line."""
    try:
        config.load()
    except (ConfigurationError, StoreError) as exc:
        sock.close()
        typer.echo(scrub(f"pigeon serve: {exc}"), err=True)
        raise typer.Exit(2) from exc


def _run(config: uvicorn.Config, sock: socket.socket, options: ServerOptions) -> None:
    """uvicorn on ``sock`` until it stops, in this process or under its supervisor of
    ``config.workers`` processes (a worker it replaces is counted in the database); with
    ``--relay-to`` a relay beside it.

    The relay runs in this process (uvicorn's workers are spawned, not forked), on its
    own connection, and stops after the server did."""
    database = options.database
    assert database is not None
    runner = None
    if options.relay_to is not None:
        # The relay (pigeon.jobs, ~0.1 s of imports) loads only when --relay-to asks for it.
        from pigeon.cli.relay_cmd import make_runner, stop_before_exit_signals

        runner = make_runner(
            database.url, options.relay_to, "serve", keys_file=database.keys_file
        ).start()
        stop_before_exit_signals(runner)
    try:
        if config.workers > 1:
            sockets = worker_sockets(sock, config.workers)
            supervisor = _Supervisor(config, sockets=sockets, db=database.url)
            supervisor.run()
            if supervisor.failed_to_start:  # each worker said why, in one line
                raise typer.Exit(STARTUP_FAILURE)
        else:
            uvicorn.Server(config).run(sockets=[sock])
    finally:
        if runner is not None:
            runner.stop()


class _Supervisor(uvicorn.supervisors.Multiprocess):
    """uvicorn's supervisor of ``--workers N``, saying at WARNING (``pigeon serve``'s
    default level; uvicorn says it at INFO) when it replaces a worker that died, and
    counting it in the database (``pigeon.lifecycle``: ``/metrics`` reads it there). A
    worker that could not start (its app could not be made) stops it, as uvicorn's does,
    and ``failed_to_start`` says so."""

    def __init__(self, config: uvicorn.Config, sockets: list[socket.socket], db: str) -> None:
        super().__init__(config, sockets=sockets)
        self.db = db
        self.failed_to_start = False

    def keep_subprocess_alive(self) -> None:
        before = list(self.processes)
        super().keep_subprocess_alive()
        if any(p.exitcode == STARTUP_FAILURE for p in self.processes):
            self.failed_to_start = True
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


def _bind_and_open(options: ServerOptions) -> socket.socket:
    """The listening socket, then the database opened (and migrated) once and closed.

    Bound first: a refused address or port must not leave a new database file behind.
    Opened here: a bad file fails now, with its message, not in every worker."""
    sock = listen_socket(options.listen.host, options.listen.port)
    db = options.database
    assert db is not None
    try:
        database = open_server_db(db.url, durability=db.durability)
        try:
            if options.app == REFERENCE_APP:  # its own tables (its schema component)
                attach_reference(database)
        finally:
            database.close()
    except StoreError as exc:
        sock.close()
        typer.echo(scrub(f"pigeon serve: {exc}"), err=True)
        raise typer.Exit(2) from exc
    return sock


def _announce(sock: socket.socket, options: ServerOptions) -> None:
    """The "serving on" line (what scripts and tests wait for), after a loud warning when
    the test hooks are on."""
    bound_host, bound_port = sock.getsockname()[:2]
    if options.intake.test_hooks:
        typer.secho(
            "WARNING: --test-hooks is on: any client may delay and fail requests with "
            "X-Pigeon-Test-* headers. For tests only.",
            err=True,
            fg=typer.colors.RED,
            bold=True,
        )
    served = (
        "the reference notes app (--app module:factory serves yours)"
        if options.app == REFERENCE_APP
        else f"the app {options.app}"
    )
    typer.echo(f"pigeon serving on http://{bound_host}:{bound_port} (pid {os.getpid()}): {served}")
    sys.stdout.flush()

"""What a server is configured with, in one frozen value: ``ServerOptions``.

``pigeon serve`` builds it once from its command line and every process that serves gets
that same object: uvicorn's worker processes receive it pickled with their configuration
(through the pipe that starts them), never through the environment or a file. ``Intake``
takes its part (``IntakeOptions``), ``create_app`` / ``create_notes_app`` and an
application's own factory (``pigeon serve --app module:factory``) take the whole.

Each part checks its values when it is made, as ``httpx.Timeout`` does, and
``ServerOptions`` the ones that depend on each other; a refusal is a ``ConfigurationError``
whose ``field`` names the setting to blame (``pigeon serve`` shows it as its option).
Secrets (the JWT secret, the operator token, a database or broker URL's password) are held
as given and shown by no ``repr``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal, TypeVar, get_args

from pigeon.checks import is_finite, is_int_in, is_number
from pigeon.exceptions import ConfigurationError
from pigeon.logs import LOG_FORMATS, LogFormat
from pigeon.server.auth_options import AuthOptions, is_loopback
from pigeon.server.idempotency import IdempotencyPolicy
from pigeon.server.limits import DEFAULT_MAX_BATCH_BODY, DEFAULT_MAX_BODY, checked_limits
from pigeon.storage.base import Database
from pigeon.storage.crypto import Keyring
from pigeon.storage.server import open_server_db
from pigeon.storage.sqlite import Durability
from pigeon.urls import redact_urls

ClaimMode = Literal["inline", "separate"]
MAX_IN_PROGRESS_WAIT = 30.0
# uvicorn's own level names (uvicorn.config.LOG_LEVELS; a test keeps the two equal).
LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]
DEFAULT_IDLE = 10.0
DEFAULT_HEADERS = 10.0
DEFAULT_BODY = 60.0
DEFAULT_DRAIN_TIMEOUT = 5.0
IDLE_ENV = "PIGEON_OPS_SESSION_IDLE"
LIFETIME_ENV = "PIGEON_OPS_SESSION_LIFETIME"
MAX_LIFETIME = 30 * 86400.0


T = TypeVar("T")


def over_own(command: T, usual: T, own: T) -> T:
    """A setting of ``pigeon serve --app`` over the app's own: the command's value where it
    was given (it differs from ``usual``, the command's default), else the app's ``own``;
    a dataclass (a policy) field by field, checked again as a whole."""
    if not is_dataclass(command) or isinstance(command, type):
        return command if command != usual else own
    given: dict[str, Any] = {
        f.name: getattr(command, f.name)
        for f in fields(command)
        if getattr(command, f.name) != getattr(usual, f.name)
    }
    return replace(own, **given)  # type: ignore[type-var]


def _one_of(name: str, value: object, allowed: tuple[object, ...]) -> None:
    if value not in allowed:
        choices = " or ".join(repr(a) for a in allowed)
        raise ConfigurationError(f"{name} must be {choices}, not {value!r}", field=name)


@dataclass(frozen=True, slots=True)
class IntakeOptions:
    """How the intake applies operations (`pigeon.server.intake`): its idempotency
    ``policy``, its ``claim_mode``, seconds a duplicate of a request in progress waits for
    it (``in_progress_wait``, 0: 409 at once), operations per batch transaction
    (``batch_chunk``; None: the whole batch in one) and the fault switch for tests
    (``test_hooks``, `pigeon.server.testhooks`)."""

    policy: IdempotencyPolicy = field(default_factory=IdempotencyPolicy)
    claim_mode: ClaimMode = "inline"
    in_progress_wait: float = 0.0
    batch_chunk: int | None = None
    test_hooks: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.policy, IdempotencyPolicy):
            raise ConfigurationError("policy must be an IdempotencyPolicy", field="policy")
        _one_of("claim_mode", self.claim_mode, get_args(ClaimMode))
        wait = self.in_progress_wait
        if not (is_finite(wait) and 0 <= wait <= MAX_IN_PROGRESS_WAIT):
            raise ConfigurationError(
                f"in_progress_wait must be from 0 to {MAX_IN_PROGRESS_WAIT} seconds, not {wait}",
                field="in_progress_wait",
            )
        if self.batch_chunk is not None and not is_int_in(self.batch_chunk, 1):
            raise ConfigurationError(
                f"batch_chunk must be at least 1, not {self.batch_chunk}", field="batch_chunk"
            )
        if not isinstance(self.test_hooks, bool):
            raise ConfigurationError(
                f"test_hooks must be True or False, not {self.test_hooks!r}", field="test_hooks"
            )


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """Bytes of request body one operation (``max_body``) and a batch
    (``max_batch_body``) may have; more is 413 before it is read whole
    (`pigeon.server.limits`). An operation must fit in a batch of one."""

    max_body: int = DEFAULT_MAX_BODY
    max_batch_body: int = DEFAULT_MAX_BATCH_BODY

    def __post_init__(self) -> None:
        checked_limits(self.max_body, self.max_batch_body)


@dataclass(frozen=True, slots=True)
class ConnectionTimeouts:
    """Seconds a connection may idle, take for its request head, take for its body
    (`pigeon.server.timeouts`; not ``pigeon.jobs.Timeouts``, a job's deadlines)."""

    idle: float = DEFAULT_IDLE
    headers: float = DEFAULT_HEADERS
    body: float = DEFAULT_BODY

    def __post_init__(self) -> None:
        for name in ("idle", "headers", "body"):
            value = getattr(self, name)
            if not (is_number(value) and 0 < value < 86400):
                raise ConfigurationError(
                    f"the {name} timeout must be 0 < seconds < 86400, not {value!r}",
                    field=f"timeout_{name}",
                )


@dataclass(frozen=True, slots=True)
class SessionPolicy:
    """How long a browser stays signed in to the operations page (`pigeon.ops.session`):
    ``idle`` seconds without a request, and ``lifetime`` seconds after sign-in at most,
    whichever ends first."""

    idle: float = 3600.0
    lifetime: float = 8 * 3600.0

    def __post_init__(self) -> None:
        for label, value in (("idle", self.idle), ("lifetime", self.lifetime)):
            if not (is_finite(value) and 0 < value <= MAX_LIFETIME):
                raise ConfigurationError(
                    f"the operations page's session {label} is seconds in (0, {MAX_LIFETIME:.0f}]"
                    f", not {value!r}",
                    field=f"session_{label}",
                )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SessionPolicy:
        """The policy of ``PIGEON_OPS_SESSION_IDLE`` / ``PIGEON_OPS_SESSION_LIFETIME``
        (seconds; unset: the defaults). ConfigurationError for a value that is not one."""
        env = os.environ if env is None else env
        values: dict[str, float] = {}
        for name, label in ((IDLE_ENV, "idle"), (LIFETIME_ENV, "lifetime")):
            text = env.get(name, "").strip()
            if not text:
                continue
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not (is_finite(value) and 0 < value <= MAX_LIFETIME):
                raise ConfigurationError(
                    f"{name} is seconds in (0, {MAX_LIFETIME:.0f}], not {text!r}",
                    field=f"session_{label}",
                )
            values[label] = value
        return cls(**values)

    @property
    def touch_every(self) -> float:
        """A session's last use is written at most this often (not on every request)."""
        return min(60.0, self.idle / 4)


@dataclass(frozen=True, slots=True)
class DatabaseOptions:
    """The server database: ``url`` (a SQLite path, absolute for the worker processes, or
    ``postgresql://...``), SQLite's ``durability``, and the key file that seals its values
    at rest (None: ``PIGEON_KEYS`` / ``PIGEON_KEYS_FILE``, else nothing sealed)."""

    url: str
    durability: Durability = "full"
    keys_file: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise ConfigurationError("the database URL or path is empty", field="db")
        _one_of("durability", self.durability, ("full", "normal"))

    def __repr__(self) -> str:  # a URL's password never reaches a log line
        return (
            f"DatabaseOptions(url={redact_urls(self.url)!r}, durability={self.durability!r}, "
            f"keys_file={self.keys_file!r})"
        )

    @property
    def is_postgres(self) -> bool:
        return self.url.startswith(("postgresql://", "postgres://"))

    def keyring(self) -> Keyring | None:
        return Keyring.from_file(self.keys_file) if self.keys_file else Keyring.from_env()

    def open(self) -> Database:
        """The database, opened (and migrated) with its keyring."""
        return open_server_db(self.url, durability=self.durability, keyring=self.keyring())


@dataclass(frozen=True, slots=True)
class ListenOptions:
    """Where and how ``pigeon serve`` listens: ``host`` and ``port`` (0: any free one),
    ``workers`` processes, ``insecure`` (the demo authenticator off loopback anyway), the
    connection ``timeouts`` and ``drain_timeout``: seconds the requests in flight at a
    SIGTERM may take to finish before they are cut off (uncommitted, their keys free)."""

    host: str = "127.0.0.1"
    port: int = 8765
    workers: int = 1
    insecure: bool = False
    timeouts: ConnectionTimeouts = field(default_factory=ConnectionTimeouts)
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ConfigurationError("host must name an interface", field="host")
        if not is_int_in(self.port, 0, 65535):
            raise ConfigurationError(f"port must be from 0 to 65535, not {self.port}", field="port")
        if not is_int_in(self.workers, 1):
            raise ConfigurationError(
                f"workers must be at least 1, not {self.workers}", field="workers"
            )
        drain = self.drain_timeout
        if not (is_finite(drain) and drain >= 0):
            raise ConfigurationError(
                f"drain_timeout must be seconds >= 0, not {drain!r}", field="drain_timeout"
            )


@dataclass(frozen=True, slots=True)
class LogOptions:
    """uvicorn's and pigeon's logs: the ``level``, ``text`` or ``json``, and field names
    to redact besides the built-in ones (`pigeon.logs`)."""

    level: LogLevel = "warning"
    format: LogFormat = "text"
    redact: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _one_of("log_level", self.level, get_args(LogLevel))
        _one_of("log_format", self.format, LOG_FORMATS)


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """Every setting of a server (``pigeon serve``'s options, grouped). ``app``: the
    ``module:factory`` it serves (None: the reference notes app); ``relay_to``: a broker
    to publish the outbox to from the serving process (`pigeon.jobs.relay`)."""

    database: DatabaseOptions | None = None
    intake: IntakeOptions = field(default_factory=IntakeOptions)
    limits: BodyLimits = field(default_factory=BodyLimits)
    auth: AuthOptions = field(default_factory=AuthOptions)
    sessions: SessionPolicy = field(default_factory=SessionPolicy)
    listen: ListenOptions = field(default_factory=ListenOptions)
    logs: LogOptions = field(default_factory=LogOptions)
    relay_to: str | None = None
    app: str | None = None

    def __post_init__(self) -> None:
        host = self.listen.host
        if self.intake.test_hooks and not is_loopback(host):
            raise ConfigurationError(
                f"test_hooks lets any client delay and fail requests at will: it is for tests "
                f"on a loopback address only, not {host!r}",
                field="test_hooks",
            )
        self.auth.check(host, insecure=self.listen.insecure)

    def __repr__(self) -> str:
        relay = None if self.relay_to is None else redact_urls(self.relay_to)
        return (
            f"ServerOptions(app={self.app!r}, database={self.database!r}, "
            f"intake={self.intake!r}, limits={self.limits!r}, auth={self.auth!r}, "
            f"sessions={self.sessions!r}, listen={self.listen!r}, logs={self.logs!r}, "
            f"relay_to={relay!r})"
        )

    def open_db(self) -> Database:
        """The server database these options name, opened with its keyring."""
        if self.database is None:
            raise ConfigurationError("these ServerOptions name no database", field="db")
        return self.database.open()

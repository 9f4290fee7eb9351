"""``ServerOptions``: each part checks its own values and their order when it is made, and
a refusal names the setting to blame (``field``); the whole is one frozen value that
pickles unchanged (what each worker process of ``pigeon serve`` receives) and whose
``repr`` shows no secret."""

from __future__ import annotations

import dataclasses
import math
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

from pigeon.exceptions import ConfigurationError
from pigeon.server.app import create_app
from pigeon.server.auth import BearerAuth
from pigeon.server.auth_options import AuthOptions
from pigeon.server.idempotency import IdempotencyPolicy
from pigeon.server.idempotency_memory import MemoryDatabase
from pigeon.server.intake import Intake
from pigeon.server.options import (
    BodyLimits,
    ConnectionTimeouts,
    DatabaseOptions,
    IntakeOptions,
    ListenOptions,
    LogOptions,
    ServerOptions,
    SessionPolicy,
)

SECRET = "the-options-tests-hs256-secret-0123456789"
OPERATOR = "operator-token-of-the-options-tests"

BAD: list[tuple[str, Callable[[], object]]] = [
    ("claim_mode", lambda: IntakeOptions(claim_mode="twice")),  # type: ignore[arg-type]
    ("in_progress_wait", lambda: IntakeOptions(in_progress_wait=31)),
    ("in_progress_wait", lambda: IntakeOptions(in_progress_wait=-1)),
    ("in_progress_wait", lambda: IntakeOptions(in_progress_wait=math.nan)),
    ("batch_chunk", lambda: IntakeOptions(batch_chunk=0)),
    ("test_hooks", lambda: IntakeOptions(test_hooks=1)),  # type: ignore[arg-type]
    ("lock_timeout", lambda: IdempotencyPolicy(lock_timeout=0)),
    ("lock_timeout", lambda: IdempotencyPolicy(lock_timeout=math.inf)),
    ("response_retention", lambda: IdempotencyPolicy(response_retention=math.nan)),
    ("response_retention", lambda: IdempotencyPolicy(lock_timeout=60, response_retention=30)),
    ("claim_retention", lambda: IdempotencyPolicy(response_retention=100, claim_retention=50)),
    ("max_body", lambda: BodyLimits(max_body=0)),
    ("max_body", lambda: BodyLimits(max_body=True)),
    ("max_batch_body", lambda: BodyLimits(max_batch_body=-1)),
    ("max_batch_body", lambda: BodyLimits(max_body=5000, max_batch_body=4000)),
    ("timeout_idle", lambda: ConnectionTimeouts(idle=0)),
    ("timeout_headers", lambda: ConnectionTimeouts(headers=math.nan)),
    ("timeout_body", lambda: ConnectionTimeouts(body=1e9)),
    ("session_idle", lambda: SessionPolicy(idle=0)),
    ("session_lifetime", lambda: SessionPolicy.from_env({"PIGEON_OPS_SESSION_LIFETIME": "x"})),
    ("db", lambda: DatabaseOptions("")),
    ("durability", lambda: DatabaseOptions("s.db", durability="fast")),  # type: ignore[arg-type]
    ("host", lambda: ListenOptions(host="")),
    ("port", lambda: ListenOptions(port=70000)),
    ("workers", lambda: ListenOptions(workers=0)),
    ("drain_timeout", lambda: ListenOptions(drain_timeout=-0.5)),
    ("drain_timeout", lambda: ListenOptions(drain_timeout=math.inf)),
    ("drain_timeout", lambda: ListenOptions(drain_timeout=math.nan)),
    ("log_level", lambda: LogOptions(level="loud")),  # type: ignore[arg-type]
    ("log_format", lambda: LogOptions(format="xml")),  # type: ignore[arg-type]
    ("auth", lambda: AuthOptions(auth="basic")),  # type: ignore[arg-type]
    ("auth", lambda: AuthOptions(jwt_secret=SECRET)),  # keys, but the demo stand-in
    ("auth", lambda: AuthOptions(auth="jwt")),  # jwt, but no key
    ("auth", lambda: AuthOptions(auth="jwt", jwt_secret=SECRET, jwks_file=Path("k.json"))),
    ("operator_token", lambda: AuthOptions(operator_token="short")),
    # The parts together: what depends on another part's value.
    ("auth", lambda: ServerOptions(listen=ListenOptions(host="0.0.0.0"))),
    (
        "test_hooks",
        lambda: ServerOptions(
            intake=IntakeOptions(test_hooks=True),
            listen=ListenOptions(host="10.0.0.1", insecure=True),
        ),
    ),
    ("db", lambda: ServerOptions().open_db()),
]


@pytest.mark.parametrize(("field", "make"), BAD, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD)])
def test_a_bad_value_is_refused_naming_its_field(field: str, make: Callable[[], object]) -> None:
    with pytest.raises(ConfigurationError) as refused:
        make()
    assert refused.value.field == field
    assert str(refused.value)  # says why, in words


def test_the_defaults_and_good_values_are_taken() -> None:
    options = ServerOptions(
        database=DatabaseOptions("/srv/pigeon.db", "normal", "/srv/keys"),
        intake=IntakeOptions(IdempotencyPolicy(5, 60, 600), "separate", 2.5, 64, False),
        limits=BodyLimits(1000, 1000),
        auth=AuthOptions("jwt", jwt_secret=SECRET, operator_token=OPERATOR),
        listen=ListenOptions("0.0.0.0", 0, 4),
        logs=LogOptions("info", "json", ("card",)),
    )
    assert options.intake.policy.lock_timeout == 5 and options.listen.workers == 4
    assert ServerOptions().listen.host == "127.0.0.1"  # loopback, the demo stand-in


def test_frozen_picklable_and_no_secret_in_its_repr() -> None:
    options = ServerOptions(
        database=DatabaseOptions("postgresql://pigeon:db-password-1@localhost/p"),
        auth=AuthOptions("jwt", jwt_secret=SECRET, operator_token=OPERATOR),
        relay_to="redis://:relay-password-2@localhost:6379/0",
    )
    assert pickle.loads(pickle.dumps(options)) == options
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.listen.port = 1  # type: ignore[misc]
    shown = repr(options)
    for secret in (SECRET, OPERATOR, "db-password-1", "relay-password-2"):
        assert secret not in shown
    assert "localhost" in shown and "operator=yes" in shown


def test_create_app_takes_the_options_of_its_intake_only() -> None:
    intake = Intake(MemoryDatabase(), IntakeOptions(claim_mode="separate"))
    with pytest.raises(ConfigurationError) as refused:
        create_app(intake, ServerOptions(), purge_interval=None)
    assert refused.value.field == "intake"
    options = ServerOptions(intake=intake.options, limits=BodyLimits(1000, 2000))
    app = create_app(intake, options, purge_interval=None)
    assert app.state.options == options


def test_an_authenticator_given_and_another_in_the_options_are_refused() -> None:
    intake = Intake(MemoryDatabase())
    jwt = ServerOptions(auth=AuthOptions("jwt", jwt_secret=SECRET))
    with pytest.raises(ConfigurationError) as refused:
        create_app(intake, jwt, authenticate=BearerAuth(), purge_interval=None)
    assert refused.value.field == "auth"

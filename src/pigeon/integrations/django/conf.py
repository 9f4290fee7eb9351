"""pigeon's settings in a Django project: the ``PIGEON`` dict of ``settings.py``.

    PIGEON = {
        "PRINCIPAL": "myapp.auth.principal",   # request -> str | None; default: the user's pk
        "JOBS_APP": "myapp.jobs:app",          # the pigeon.jobs.App: defer()'s checks, the worker
        "KEYS_FILE": "/etc/myapp/pigeon-keys.json",  # else PIGEON_KEYS / PIGEON_KEYS_FILE
        "LOCK_TIMEOUT": 10.0, "RESPONSE_RETENTION": 86400.0, "CLAIM_RETENTION": 2592000.0,
        "MAX_BODY": 2 << 20, "MAX_BATCH_BODY": 16 << 20, "CLAIM_WAIT": 0.5,
    }

Every key is optional. ``TEST_HOOKS`` (with ``PIGEON_TEST_HOOKS=1`` in the environment,
for loopback requests only) turns on the fault switch of `pigeon.server.testhooks`;
``AFTER_COMMIT`` names a ``callable(keys)`` called between the commit and the answer
(the crash tests die there). Read once per process; ``override_settings`` reloads it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from pigeon.exceptions import ConfigurationError
from pigeon.integrations.claims import Claims
from pigeon.jobs.app import App, load_app
from pigeon.server.idempotency import CLAIM_WAIT, IdempotencyPolicy
from pigeon.server.limits import DEFAULT_MAX_BATCH_BODY, DEFAULT_MAX_BODY, checked_limits
from pigeon.server.testhooks import ENV_KEY as TEST_HOOKS_KEY
from pigeon.storage.crypto import Keyring

Principal = Callable[[Any], "str | None"]

KNOWN = frozenset(
    {
        "PRINCIPAL",
        "JOBS_APP",
        "KEYS_FILE",
        "LOCK_TIMEOUT",
        "RESPONSE_RETENTION",
        "CLAIM_RETENTION",
        "MAX_BODY",
        "MAX_BATCH_BODY",
        "CLAIM_WAIT",
        "TEST_HOOKS",
        "AFTER_COMMIT",
    }
)


# The settings of the idempotency policy, and the policy's field each one sets.
POLICY_SETTINGS = {
    "LOCK_TIMEOUT": "lock_timeout",
    "RESPONSE_RETENTION": "response_retention",
    "CLAIM_RETENTION": "claim_retention",
}


def user_principal(request: Any) -> str | None:
    """The default principal: the signed-in user's primary key (stable, where a username
    may change); None for a request without one (then ``anonymous``)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return str(user.pk)


@dataclass(frozen=True)
class Configured:
    """``settings.PIGEON`` read: the claims of this process and what they need."""

    claims: Claims
    principal: Principal
    keyring: Keyring | None
    max_body: int
    test_hooks: bool
    jobs_app: str | None
    max_batch_body: int = DEFAULT_MAX_BATCH_BODY

    def app(self) -> App | None:
        """The project's ``pigeon.jobs.App`` (``JOBS_APP``), if it names one."""
        return None if self.jobs_app is None else _app(self.jobs_app)


@functools.cache
def _app(ref: str) -> App:
    return load_app(ref)


def _callable(value: Any, name: str) -> Any:
    found = import_string(value) if isinstance(value, str) else value
    if not callable(found):
        raise ConfigurationError(f"PIGEON[{name!r}] must name a callable, not {value!r}")
    return found


def read(options: Mapping[str, Any]) -> Configured:
    """``options`` (a ``PIGEON`` dict) checked and built into the claims they configure."""
    unknown = sorted(set(options) - KNOWN)
    if unknown:
        raise ConfigurationError(f"settings.PIGEON has unknown keys {unknown}: {sorted(KNOWN)}")
    policy = IdempotencyPolicy(
        **{field: float(options[key]) for key, field in POLICY_SETTINGS.items() if key in options}
    )
    after = options.get("AFTER_COMMIT")
    claims = Claims(
        policy,
        claim_wait=float(options.get("CLAIM_WAIT", CLAIM_WAIT)),
        after_commit=None if after is None else _callable(after, "AFTER_COMMIT"),
    )
    keys_file = options.get("KEYS_FILE")
    max_body, max_batch_body = checked_limits(
        options.get("MAX_BODY", DEFAULT_MAX_BODY),
        options.get("MAX_BATCH_BODY", DEFAULT_MAX_BATCH_BODY),
        names=("PIGEON['MAX_BODY']", "PIGEON['MAX_BATCH_BODY']"),
    )
    return Configured(
        claims=claims,
        principal=_callable(options.get("PRINCIPAL", user_principal), "PRINCIPAL"),
        keyring=Keyring.from_file(keys_file) if keys_file else Keyring.from_env(),
        max_body=max_body,
        # Two keys, as for pigeon serve: the setting and the environment variable.
        test_hooks=bool(options.get("TEST_HOOKS")) and os.environ.get(TEST_HOOKS_KEY) == "1",
        jobs_app=options.get("JOBS_APP"),
        max_batch_body=max_batch_body,
    )


@functools.cache
def configured() -> Configured:
    """This process's ``settings.PIGEON``, read once (one ``Claims``: one in-flight set)."""
    return read(getattr(settings, "PIGEON", {}))


@receiver(setting_changed)
def _reload(*, setting: str, **_: Any) -> None:
    if setting == "PIGEON":
        configured.cache_clear()

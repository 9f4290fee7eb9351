"""What a rehearsal may be told about an app beyond what it serves: ``RehearsalHooks``.

    # myapp/rehearsal.py, run with: pigeon rehearse --app ... --hooks myapp.rehearsal:hooks
    from pigeon.rehearse import RehearsalHooks, Request

    def new_order(n: int, rng: random.Random) -> dict:          # a body for POST /orders
        return {"sku": rng.choice(["A-1", "B-2"]), "quantity": 1 + n % 3}

    def pay(n: int, rng: random.Random) -> Request:             # a path with a parameter
        return Request("PUT", f"/payments/p{n}", {"amount": 10})

    hooks = RehearsalHooks(
        requests={"POST /orders": new_order, "PUT /payments/{id}": pay},
        tables=("orders", "payments"),           # the app's own rows: counted as its effects
    )

``requests``: per route (``"METHOD /path"`` as the app declares it), a maker called with the
request's number in its scenario and a seeded ``random.Random``; it returns the JSON body, or
a whole ``Request`` (for a path with parameters, or headers). Each request a scenario sends
comes from one of them, round-robin. Without makers the rehearsal replays the examples the
app's OpenAPI document publishes for each write (``examples`` in a request schema).

``tables``: the app's own tables: a faulted request must leave as many rows in each as the
same request sent without a fault. pigeon's own (records, obligations, jobs, effects,
outbox) are always counted.

``counters``: what the app keeps outside the server database, by name: a function
counting it now (the rows of its own database, the messages in a provider's sandbox);
counted beside the tables, and compared the same way.

``providers``: the provider adapters the app's tasks call (``module:attr`` of each
`pigeon.jobs.providers.Provider` object), for ``provider-unknown``: the rehearsal's
workers lose the answer of each reference's first call after the provider applied it.

``revoke``: how a principal loses access (``(tx, principal)``, in a transaction of the
server database), for ``revoked-access``; by default ``pigeon.jobs.access.revoke``, the list
the tasks' ``access`` re-checks read.

Each request is sent as a principal of its own (``Authorization: Bearer <principal>.x``,
the server's demo authentication on loopback), so what one request left is told apart from
another's wherever the app keeps the principal (pigeon's records do).
"""

from __future__ import annotations

import importlib
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pigeon.exceptions import ConfigurationError
from pigeon.jobs import access
from pigeon.storage.base import Tx


@dataclass(frozen=True)
class Request:
    """One request to send: ``path`` concrete (``/notes/n1``), ``body`` a JSON value."""

    method: str
    path: str
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


RequestMaker = Callable[[int, random.Random], "Request | Any"]
Revoker = Callable[[Tx, str], None]
_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_ROUTE = re.compile(r"(GET|POST|PUT|PATCH|DELETE) (/\S*)")


def revoke_listed(tx: Tx, principal: str) -> None:
    """The default ``revoke``: on pigeon's list of revoked principals."""
    access.revoke(tx, principal, reason="revoked by pigeon rehearse")


@dataclass(frozen=True)
class RehearsalHooks:
    requests: Mapping[str, RequestMaker] = field(default_factory=dict)
    tables: tuple[str, ...] = ()
    counters: Mapping[str, Callable[[], int]] = field(default_factory=dict)
    providers: tuple[str, ...] = ()
    revoke: Revoker = revoke_listed

    def __post_init__(self) -> None:
        for route in self.requests:
            if not _ROUTE.fullmatch(route):
                raise ConfigurationError(
                    f"requests: {route!r} is no route: write it 'METHOD /path', e.g. 'POST /orders'"
                )
        for ref in self.providers:
            module, _, attr = ref.partition(":")
            if not attr.isidentifier() or not all(p.isidentifier() for p in module.split(".")):
                raise ConfigurationError(f"providers: {ref!r} must look like 'module:attr'")
        for table in self.tables:
            if not _TABLE.fullmatch(table):
                raise ConfigurationError(
                    f"tables: {table!r} is no plain table name (letters, digits, underscores)"
                )


def make_request(route: str, made: Request | Any) -> Request:
    """What a maker of ``route`` returned, as a ``Request`` (a bare body: to the route's
    own path, which then must have no parameter)."""
    if isinstance(made, Request):
        return made
    method, _, path = route.partition(" ")
    if "{" in path:
        raise ConfigurationError(
            f"the maker of {route!r} returned a body: a path with parameters needs a Request"
        )
    return Request(method, path, made)


def load_hooks(ref: str) -> RehearsalHooks:
    """The ``RehearsalHooks`` that ``module:attr`` names (the current folder searched first)."""
    module_name, _, attr = ref.partition(":")
    if not attr.isidentifier() or not all(p.isidentifier() for p in module_name.split(".")):
        raise ConfigurationError(f"--hooks must look like 'package.module:attr', got {ref!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r} for --hooks: {exc}") from exc
    hooks = getattr(module, attr, None)
    if not isinstance(hooks, RehearsalHooks):
        raise ConfigurationError(
            f"--hooks {ref} is a {type(hooks).__name__}, not a pigeon.rehearse.RehearsalHooks"
        )
    return hooks

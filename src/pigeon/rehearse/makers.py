"""The requests a rehearsal sends: the app's makers (`RehearsalHooks.requests`), or by
default the examples its OpenAPI document publishes for each idempotent write, and what
each request is sent as (``Planned``: a key and a principal of its own).

An example is taken from the request schema's ``examples`` (a list, JSON Schema's keyword,
published as the route declared it) or the media type's ``examples`` / ``example``. A path
parameter gets a fresh id; where the route says the body's id is the path's
(``x-pigeon-path-id``), the body carries it too.
"""

from __future__ import annotations

import itertools
import random
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pigeon.exceptions import ConfigurationError
from pigeon.rehearse.hooks import Request, RequestMaker, make_request

WRITE_METHODS = ("post", "put", "patch", "delete")
_PARAM = re.compile(r"\{[^}]*\}")


@dataclass(frozen=True)
class Planned:
    """A request as a scenario sends it: its idempotency key, made once and sent with
    every attempt, and the principal it is sent as."""

    request: Request
    key: str
    principal: str

    @property
    def headers(self) -> dict[str, str]:
        return {
            "Idempotency-Key": self.key,
            "Authorization": f"Bearer {self.principal}.rehearsal",
            **self.request.headers,
        }


@dataclass
class Makers:
    """Round-robin over the routes' makers, numbered per scenario, from one seed."""

    makers: Mapping[str, RequestMaker]
    seed: int = 0
    _counter: Iterator[int] = field(default_factory=itertools.count, init=False)

    def __post_init__(self) -> None:
        if not self.makers:
            raise ConfigurationError(
                "no request to send: the app's OpenAPI document publishes no example for any "
                "write, and no maker was given (RehearsalHooks.requests)"
            )
        self._routes = sorted(self.makers)
        self._rng = random.Random(self.seed)

    @property
    def routes(self) -> list[str]:
        return list(self._routes)

    def next(self) -> Request:
        """The next route's next request."""
        n = next(self._counter)
        return self._make(self._routes[n % len(self._routes)], n)

    def next_for(self, route: str) -> Request:
        """The next request of ``route``."""
        return self._make(route, next(self._counter))

    def _make(self, route: str, n: int) -> Request:
        return make_request(route, self.makers[route](n, self._rng))

    def plan(self, principal: str, request: Request | None = None) -> Planned:
        """The next request (or ``request``) under a new key, as ``principal``."""
        return Planned(request or self.next(), uuid.uuid4().hex, principal)


def examples_of(operation: Mapping[str, Any]) -> list[Any]:
    """The example bodies an OpenAPI operation publishes."""
    content = operation.get("requestBody", {}).get("content", {})
    media = content.get("application/json", {})
    found: list[Any] = list(media.get("schema", {}).get("examples", []))
    found += [e["value"] for e in media.get("examples", {}).values() if "value" in e]
    if "example" in media:
        found.append(media["example"])
    return found


def openapi_makers(document: Mapping[str, Any]) -> dict[str, RequestMaker]:
    """A maker per idempotent write of ``document`` that publishes examples."""
    makers: dict[str, RequestMaker] = {}
    for path, item in sorted(document.get("paths", {}).items()):
        for method, operation in sorted(item.items()):
            if method not in WRITE_METHODS or not operation.get("x-pigeon-idempotent"):
                continue
            examples = examples_of(operation)
            if examples:
                route = f"{method.upper()} {path}"
                makers[route] = _replay(route, examples, operation.get("x-pigeon-path-id"))
    return makers


def _replay(route: str, examples: list[Any], path_id: str | None) -> RequestMaker:
    method, _, template = route.partition(" ")

    def make(n: int, rng: random.Random) -> Request:
        body = examples[n % len(examples)]
        path = template
        if "{" in template:
            fresh = f"r{n}x{rng.getrandbits(32):08x}"
            path = _PARAM.sub(fresh, template)
            if path_id is not None and isinstance(body, dict):
                body = {**body, path_id: fresh}
        return Request(method, path, body)

    return make

"""What a route declares about its request, checked BEFORE the idempotency key is claimed.

Stripe's rule, which the protocol follows: a response is saved under the key only once the
endpoint started executing. A request that is invalid for its route (the wrong shape, a
missing field) has not started anything: its refusal must not be stored, or a client that
corrects the body and sends it again under the same key (the edge queue never changes a
key) meets ``422 key-reused`` for ever.

So each route may declare

- ``request_schema``: a JSON Schema (2020-12, as OpenAPI 3.1) of the body, enforced here
  with ``jsonschema`` and published as is in the OpenAPI document: one declaration, so the
  document and the check cannot drift apart;
- ``validate``: a callable ``(body, path_params) -> None`` for what a schema cannot say
  (the body's id must match the path's), raising ``ValidationError``.

Either refusal answers 400 (or the 422 a validator asks for) as problem+json, with the key
left free. What the handler itself refuses after execution began (a 404, a stale
``If-Match``'s 412) is a business answer and is stored, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from pigeon.exceptions import ConfigurationError, ValidationError
from pigeon.server.results import OpResult, problem_result
from pigeon.server.schema_check import SchemaCheck

Validator = Callable[[Any, Mapping[str, Any]], None]

__all__ = ["RequestCheck", "ValidationError", "Validator", "invalid"]


def _where(error: jsonschema.ValidationError) -> str:
    """``body``, ``body.title`` or ``body.tags[2]``: where in the body the error is."""
    where = "body"
    for part in error.absolute_path:
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    return where


@dataclass(frozen=True, slots=True)
class RequestCheck:
    """A route's declared request validation, compiled once at registration."""

    schema: Mapping[str, Any] | None = None
    validate: Validator | None = None
    _check: SchemaCheck | None = None

    @classmethod
    def of(
        cls, schema: Mapping[str, Any] | None, validate: Validator | None
    ) -> RequestCheck | None:
        if schema is None and validate is None:
            return None
        check = None
        if schema is not None:
            try:
                jsonschema.Draft202012Validator.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise ConfigurationError(
                    f"request_schema is not a valid JSON Schema: {exc.message}"
                ) from exc
            check = SchemaCheck.of(schema)
        return cls(schema, validate, check)

    def timed(self, body: Any, path_params: Mapping[str, Any]) -> tuple[OpResult | None, float]:
        """``refusal``, and the seconds it took: the application's validator is its code as
        much as the handler is, and counts toward the route's measured duration, which
        decides what may run on the event loop (`pigeon.server.on_loop`)."""
        started = time.monotonic()
        refused = self.refusal(body, path_params)
        return refused, time.monotonic() - started

    def refusal(self, body: Any, path_params: Mapping[str, Any]) -> OpResult | None:
        """The problem that refuses this request, or None when it may run."""
        # The application's own validator first: its words (and its status) name the
        # problem better than the schema's; the schema then holds whatever it let by.
        if self.validate is not None:
            try:
                self.validate(body, path_params)
            except ValidationError as exc:
                return invalid(exc)
        if self._check is not None:
            error = self._check.error(body)
            if error is not None:
                return problem_result(
                    400, "invalid-request", "Bad request", f"{_where(error)}: {error.message}"
                )
        return None


def invalid(exc: ValidationError) -> OpResult:
    """The problem answering a ``ValidationError``: never stored, never transient."""
    title = "Bad request" if exc.status == 400 else "Unprocessable content"
    return problem_result(exc.status, exc.slug, title, exc.detail)

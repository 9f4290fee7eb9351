"""The door of the queue: what an enqueue must look like before anything is stored. Pure.

Every check runs in the caller's thread before the operation joins a group commit, so a
bad operation fails alone, with a typed error naming the problem, and nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from pigeon.checks import is_finite, is_int_in
from pigeon.core import wire
from pigeon.core.identifiers import path_segment
from pigeon.core.jsontext import one_encoder
from pigeon.core.operation import OpStatus, OpType
from pigeon.exceptions import (
    EmptyEntity,
    InvalidOperation,
    PayloadInvalid,
    PayloadNotSerializable,
    PayloadTooLarge,
    UnknownOperationType,
)

# An operation is sent with one of wire.WRITE_METHODS. Any other was stored, sent,
# answered 405 and dead-lettered; a typo ("PTU") is refused at enqueue, naming it.
# What quote(..., safe="") leaves as it is: most entity names, which then skip quote().
# One encoder, built once: json.dumps with any option builds a new one on every call.
_ENCODE = one_encoder(json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")))

# Default routing for the three standard types on an entity "kind:id": the method, and
# whether the path names the id (``/kinds/id``) or the collection (``/kinds``). Built with
# f-strings in route(), not str.format templates: every enqueue routes.
_ROUTES = {
    OpType.CREATE.value: ("POST", False),
    OpType.UPDATE.value: ("PUT", True),
    OpType.DELETE.value: ("DELETE", True),
}
# The method each standard type is sent with when none is given (pigeon.edge.coalesce).
DEFAULT_METHODS = {type_: method for type_, (method, _) in _ROUTES.items()}


def operation_type(value: str | OpType, allowed: Collection[str] | None) -> str:
    """The type as a plain string; ``allowed``, when given, is the closed set of types."""
    if isinstance(value, OpType):
        value = value.value
    if not isinstance(value, str) or not value.strip():
        raise UnknownOperationType(f"operation type must be a non-empty string, not {value!r}")
    if allowed is not None and value not in allowed:
        raise UnknownOperationType(
            f"operation type {value!r} is not one of the allowed types {sorted(allowed)!r}"
        )
    return text(value, "operation type", UnknownOperationType)


def entity_name(value: str) -> str:
    if not isinstance(value, str):
        raise EmptyEntity(f"entity must be a string such as 'note:42', not {value!r}")
    if not value.strip():
        raise EmptyEntity(f"entity must be a non-empty string such as 'note:42', not {value!r}")
    return text(value, "entity", EmptyEntity)


def text(value: str, field: str, error: type[InvalidOperation] = InvalidOperation) -> str:
    """``value`` if it can be stored: SQLite and the wire take UTF-8, and a lone surrogate
    (e.g. half of an emoji cut by a slice) has no UTF-8 form. Refused here, naming the
    field, rather than as a UnicodeEncodeError from deep inside a write."""
    if value.isascii():  # nearly every value: no encoding needed to know
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start : exc.end]
        raise error(
            f"{field} is not valid text: {bad!r} at position {exc.start} is a surrogate "
            "code point, which has no UTF-8 form"
        ) from None
    return value


def version(value: object, field: str = "base_version") -> str:
    """A base version (an etag the server gave): a non-empty string."""
    if not isinstance(value, str) or not value:
        raise InvalidOperation(f"{field} must be a non-empty string or None, not {value!r}")
    return text(value, field)


def seconds(value: object, field: str) -> float:
    """A finite number of seconds (not a bool, which is an int to Python)."""
    if not is_finite(value):
        raise InvalidOperation(f"{field} must be a finite number of seconds, not {value!r}")
    return float(value)


def count(value: object, field: str) -> int:
    """How many rows to take: an integer >= 0."""
    if not is_int_in(value, 0):
        raise InvalidOperation(f"{field} must be an integer >= 0, not {value!r}")
    return value


def stored_status(value: OpStatus | str) -> str:
    """A status operations can be stored with, as its text."""
    try:
        status = OpStatus(value)
    except ValueError:
        known = ", ".join(s.value for s in OpStatus if s is not OpStatus.COALESCED)
        raise InvalidOperation(f"unknown operation status {value!r}: one of {known}") from None
    if status is OpStatus.COALESCED:
        raise InvalidOperation(
            "no operation is stored as 'coalesced': a coalesced operation is folded into "
            "another or cancelled (stats().coalesced counts them)"
        )
    return status.value


def encode_payload(payload: Any, max_bytes: int) -> str:
    """The payload as JSON text, refused if it is not JSON, larger than ``max_bytes`` or
    nested deeper than the wire allows (PayloadInvalid, not the encoder's RecursionError)."""
    try:
        encoded = _ENCODE(payload)
    except (TypeError, ValueError) as exc:
        raise PayloadNotSerializable(f"payload is not JSON-serialisable: {exc}") from exc
    except RecursionError:
        raise _too_deep() from None
    # Hot path: ASCII (most payloads) is one byte a character, no need to encode it.
    if encoded.isascii():
        size = len(encoded)
    else:
        size = len(text(encoded, "payload", PayloadNotSerializable).encode("utf-8"))
    if size > max_bytes:
        raise PayloadTooLarge(f"payload is {size} bytes as JSON, over the limit of {max_bytes}")
    # Hot path: nesting deeper than MAX_JSON_DEPTH takes at least two characters a level
    # ("[[...]]"), so a short text (most payloads) needs no walk; a longer one is walked
    # only if it has more brackets than levels allowed.
    if len(encoded) > 2 * wire.MAX_JSON_DEPTH and _too_many_brackets(encoded, payload):
        raise _too_deep()
    return encoded


def _too_many_brackets(encoded: str, payload: Any) -> bool:
    """Deeper than allowed? Counting brackets bounds the depth from above (cheap, in C);
    only when that bound is over does the payload get walked."""
    bound = encoded.count("{") + encoded.count("[")
    return bound > wire.MAX_JSON_DEPTH and json_depth(payload) > wire.MAX_JSON_DEPTH


def _too_deep() -> PayloadInvalid:
    return PayloadInvalid(
        f"payload is nested deeper than {wire.MAX_JSON_DEPTH} levels, which the server "
        "refuses; nothing was stored"
    )


_CONTAINERS = (dict, list, tuple)  # a tuple: isinstance is faster with it than a union


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON value (an object or array is 1 more than its deepest item),
    without recursion and without looking below ``MAX_JSON_DEPTH + 1``. A level at a time:
    one list of the level's items, which costs far less than a stack of (item, depth)."""
    level, depth = [value], 0
    while True:
        containers = [item for item in level if isinstance(item, _CONTAINERS)]
        if not containers or depth > wire.MAX_JSON_DEPTH:
            return depth
        depth += 1
        level = []
        extend = level.extend
        for item in containers:
            extend(item.values() if isinstance(item, dict) else item)


def route(
    type_: str, entity: str, endpoint: str | None, method: str | None
) -> tuple[str | None, str | None]:
    """Endpoint and method to store, settled once here so that every transport sends the
    same request. Given ones are kept (method upper-cased); for the three standard types on
    an entity ``kind:id`` the default is ``POST /kinds`` (create), ``PUT /kinds/id``
    (update), ``DELETE /kinds/id`` (delete). An endpoint without a method gets its type's
    method, or POST for an app-defined type. Without an endpoint there is nothing to send
    the operation to: transports dead-letter it with a message saying so."""
    if method is not None:
        if not isinstance(method, str) or method.upper() not in wire.WRITE_METHODS:
            raise InvalidOperation(
                f"method must be one of {', '.join(wire.WRITE_METHODS)} (a write), not {method!r}"
            )
        method = method.upper()
    if endpoint is not None:
        if not isinstance(endpoint, str) or not endpoint.strip():
            raise InvalidOperation(
                f"endpoint must be a non-empty path such as '/notes/42', not {endpoint!r}"
            )
        text(endpoint, "endpoint")
    default = _ROUTES.get(type_)
    kind, sep, ident = entity.partition(":")
    if default is None or not sep or not kind or not ident:
        if endpoint is not None and method is None:
            method = default[0] if default is not None else "POST"
        return endpoint, method
    default_method, names_id = default
    if endpoint is None:
        segment = path_segment(kind)
        endpoint = f"/{segment}s/{path_segment(ident)}" if names_id else f"/{segment}s"
    return endpoint, method if method is not None else default_method

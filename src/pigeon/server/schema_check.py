"""A JSON Schema's "is this value valid?" at compiled speed, for the schemas the intake
checks on every operation (`pigeon.server.contract`, a route's ``request_schema``).

``jsonschema`` builds a validator object and an error generator per keyword and per
property it descends into: its ``is_valid`` on one batch entry took ~60 µs, more than the
entry's whole storage. ``fast_check(schema)`` compiles the schema once with
``fastjsonschema`` (generated Python, ~1 µs a note), or returns None when the schema says
something ``fastjsonschema``'s draft 7 could read otherwise than ``jsonschema``'s Draft
2020-12 (the caller keeps ``jsonschema`` for all of it).

Callers send a value the fast check refuses on to ``jsonschema``, which decides and words
the refusal: only "valid" must be exact, and tests/server/test_schema_check.py holds the
two to the same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import fastjsonschema

from pigeon.checks import is_finite, is_int, is_int_in

Check = Callable[[Any], bool]

_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})
_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_COUNTS = frozenset({"minLength", "maxLength", "minProperties", "maxProperties"})
# Keywords without subschemas, read alike by both drafts when their argument is plain.
_PLAIN_KEYWORDS = _BOUNDS | _COUNTS | {"type", "pattern", "required"}
# Keywords that never refuse a value: annotations (``format`` is one in both, as the
# fast check is compiled without format checks) and extensions ("x-...").
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "examples", "default",
     "deprecated", "readOnly", "writeOnly", "format"}
)  # fmt: skip


def fast_check(schema: object) -> Check | None:
    """``schema`` as a function ``value -> True`` when ``value`` is valid (False: ask
    ``jsonschema``), or None when it says something the fast check may read otherwise."""
    if not _same_in_both(schema):
        return None
    if isinstance(schema, Mapping):  # the draft is fastjsonschema's own (7)
        schema = {k: v for k, v in schema.items() if k not in ("$schema", "$id")}
    validate = fastjsonschema.compile(
        cast(dict[str, Any] | bool, schema), use_default=False, use_formats=False
    )

    def valid(value: Any) -> bool:
        try:
            validate(value)
        except fastjsonschema.JsonSchemaException:
            return False
        return True

    return valid


def _same_in_both(schema: object) -> bool:
    """Every keyword of ``schema`` (and its subschemas) read alike by both drafts."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, Mapping):
        return False
    for keyword, argument in schema.items():
        if keyword in _ANNOTATIONS or keyword.startswith("x-"):
            continue
        if not _plain_argument(keyword, argument):
            return False
        if keyword in _PLAIN_KEYWORDS:
            continue
        if keyword in ("enum", "const"):
            # Python's == takes 1 for True; jsonschema does not: only strings compare alike.
            members = argument if keyword == "enum" else [argument]
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                return False
        elif keyword == "not" or keyword == "additionalProperties":
            if not _same_in_both(argument):
                return False
        elif keyword in ("allOf", "anyOf", "oneOf"):
            if not isinstance(argument, list) or not all(map(_same_in_both, argument)):
                return False
        elif keyword == "properties":
            if not isinstance(argument, Mapping) or not all(map(_same_in_both, argument.values())):
                return False
        else:
            return False
    return True


def _plain_argument(keyword: str, argument: Any) -> bool:
    """A keyword without subschemas has an argument both read alike: finite bounds (a NaN
    bound compares false either way, and fastjsonschema cannot write it), known types."""
    if keyword in _BOUNDS:
        return is_int(argument) or is_finite(argument)  # an int of any size is finite
    if keyword in _COUNTS:
        return is_int_in(argument, 0)
    if keyword == "type":
        names = argument if isinstance(argument, list) else [argument]
        return all(isinstance(n, str) and n in _TYPES for n in names)
    if keyword == "pattern":
        return isinstance(argument, str)
    if keyword == "required":
        return isinstance(argument, list) and all(isinstance(n, str) for n in argument)
    return True

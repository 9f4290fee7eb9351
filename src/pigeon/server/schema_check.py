"""A JSON Schema's "is this value valid?" as plain Python, for the schemas the intake checks
on every operation (`pigeon.server.contract`, a route's ``request_schema``).

``jsonschema`` builds a validator object and an error generator per keyword and per
property it descends into: its ``is_valid`` on one batch entry took ~60 µs, more than the
entry's whole storage. ``fast_check(schema)`` compiles the schema once into nested
closures that say the same thing in a few µs, or None when the schema uses a keyword
outside the small set below (the caller keeps ``jsonschema`` for all of it).

Each keyword's closure is exact, True exactly when ``jsonschema``'s Draft 2020-12 reading
of it (its ``_keywords`` and ``_types``) finds no error, so that ``not`` of one is exact
too; tests/server/test_schema_check.py holds them to the same answers. Callers still
send a value the closures refuse on to ``jsonschema``, whose error names the problem: a
refusal and its words stay ``jsonschema``'s own.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any], bool]

# Keywords that never refuse a value (annotations), and extensions ("x-..."), which
# jsonschema ignores as every keyword it does not know.
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "examples", "default",
     "deprecated", "readOnly", "writeOnly"}
)  # fmt: skip


class _Unsupported(Exception):
    """A keyword (or a form of one) this module does not say: use jsonschema."""


def fast_check(schema: object) -> Check | None:
    """``schema`` as a function ``value -> True`` when ``value`` is valid (False: ask
    ``jsonschema``), or None when it says something beyond the keywords compiled here."""
    try:
        return _compile(schema)
    except _Unsupported:
        return None


def _is_integer(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Number)


_TYPES: dict[str, Check] = {
    "string": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": _is_integer,
    "number": _is_number,
}


def _compile(schema: object) -> Check:
    if schema is True:
        return lambda v: True
    if schema is False:
        return lambda v: False
    if not isinstance(schema, Mapping):
        raise _Unsupported
    checks: list[Check] = []
    for keyword, argument in schema.items():
        if keyword in _ANNOTATIONS or keyword.startswith("x-"):
            continue
        compile_keyword = _KEYWORDS.get(keyword)
        if compile_keyword is None:
            raise _Unsupported
        checks.append(compile_keyword(argument, schema))
    return _every(checks)


def _type(argument: Any, schema: Mapping[str, Any]) -> Check:
    names = [argument] if isinstance(argument, str) else list(argument)
    if any(name not in _TYPES for name in names):
        raise _Unsupported
    tests = [_TYPES[name] for name in names]
    if len(tests) == 1:
        return tests[0]
    return lambda v: any(test(v) for test in tests)


def _min_length(argument: Any, schema: Mapping[str, Any]) -> Check:
    return lambda v: not isinstance(v, str) or not len(v) < argument  # as jsonschema


def _max_length(argument: Any, schema: Mapping[str, Any]) -> Check:
    return lambda v: not isinstance(v, str) or not len(v) > argument


def _pattern(argument: Any, schema: Mapping[str, Any]) -> Check:
    search = re.compile(argument).search  # jsonschema's re.search, compiled once
    return lambda v: not isinstance(v, str) or search(v) is not None


def _minimum(argument: Any, schema: Mapping[str, Any]) -> Check:
    return lambda v: not _is_number(v) or not v < argument  # NaN: as jsonschema


def _maximum(argument: Any, schema: Mapping[str, Any]) -> Check:
    return lambda v: not _is_number(v) or not v > argument


def _strings(members: Any) -> frozenset[str]:
    # Only string members: jsonschema's equality of a string is ==, of others it is not.
    if not all(isinstance(member, str) for member in members):
        raise _Unsupported
    return frozenset(members)


def _enum(argument: Any, schema: Mapping[str, Any]) -> Check:
    members = _strings(argument)
    return lambda v: isinstance(v, str) and v in members


def _const(argument: Any, schema: Mapping[str, Any]) -> Check:
    members = _strings([argument])
    return lambda v: isinstance(v, str) and v in members


def _not(argument: Any, schema: Mapping[str, Any]) -> Check:
    inner = _compile(argument)  # exact, as every check here: so its negation is too
    return lambda v: not inner(v)


def _all_of(argument: Any, schema: Mapping[str, Any]) -> Check:
    return _every([_compile(each) for each in argument])


def _every(checks: list[Check]) -> Check:
    # A loop, not all() over a generator: this runs for every value of every write.
    if len(checks) == 1:
        return checks[0]

    def every(value: Any) -> bool:
        for check in checks:  # noqa: SIM110 - all() over a generator costs more
            if not check(value):
                return False
        return True

    return every


def _any_of(argument: Any, schema: Mapping[str, Any]) -> Check:
    inner = [_compile(each) for each in argument]

    def some(value: Any) -> bool:
        for check in inner:  # noqa: SIM110 - as _every
            if check(value):
                return True
        return False

    return some


def _properties(argument: Any, schema: Mapping[str, Any]) -> Check:
    inner = [(name, _compile(each)) for name, each in argument.items()]
    return lambda v: (
        not isinstance(v, dict) or all(check(v[name]) for name, check in inner if name in v)
    )


def _required(argument: Any, schema: Mapping[str, Any]) -> Check:
    names = list(argument)
    return lambda v: not isinstance(v, dict) or all(name in v for name in names)


def _additional(argument: Any, schema: Mapping[str, Any]) -> Check:
    if "patternProperties" in schema:
        raise _Unsupported
    if argument is True:
        return lambda v: True
    if argument is not False:
        raise _Unsupported
    known = frozenset(schema.get("properties", ()))
    return lambda v: not isinstance(v, dict) or known.issuperset(v)


_KEYWORDS: dict[str, Callable[[Any, Mapping[str, Any]], Check]] = {
    "type": _type,
    "minLength": _min_length,
    "maxLength": _max_length,
    "pattern": _pattern,
    "minimum": _minimum,
    "maximum": _maximum,
    "enum": _enum,
    "const": _const,
    "not": _not,
    "allOf": _all_of,
    "anyOf": _any_of,
    "properties": _properties,
    "required": _required,
    "additionalProperties": _additional,
}

"""A JSON Schema's "is this value valid?" at compiled speed, for the schemas the intake
checks on every operation (`pigeon.server.contract`, a route's ``request_schema``).

``jsonschema`` builds a validator object and an error generator per keyword and per
property it descends into: its ``is_valid`` on one batch entry took ~60 µs, more than the
entry's whole storage. ``fast_check(schema)`` compiles the schema once with
``fastjsonschema`` (generated Python, ~1 µs a note), or returns None when the schema says
something ``fastjsonschema``'s draft 7 could read otherwise than ``jsonschema``'s Draft
2020-12 (the caller keeps ``jsonschema`` for all of it).

A value the fast check refuses goes on to ``jsonschema``, which decides and words the
refusal (``SchemaCheck.error``): only "valid" must be exact, and
tests/server/test_schema_check.py holds the two to the same answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import fastjsonschema
import jsonschema
from jsonschema.exceptions import best_match

from pigeon.checks import is_finite, is_int, is_int_in

Check = Callable[[Any], bool]
_Formats = dict[str, Callable[[str], object]]

_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})
_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_COUNTS = frozenset({"minLength", "maxLength", "minProperties", "maxProperties"})
# Keywords without subschemas, read alike by both drafts when their argument is plain.
_PLAIN_KEYWORDS = _BOUNDS | _COUNTS | {"type", "pattern", "required"}
# Keywords that never refuse a value: annotations (``format`` is one in both: the fast
# check leaves it out) and extensions ("x-...").
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "examples", "default",
     "deprecated", "readOnly", "writeOnly", "format"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SchemaCheck:
    """A Draft 2020-12 schema compiled once: its fast check, then ``jsonschema``."""

    validator: jsonschema.Draft202012Validator
    valid: Check  # the fast check, or jsonschema's own where there is none

    @classmethod
    def of(cls, schema: Mapping[str, Any] | bool) -> SchemaCheck:
        validator = jsonschema.Draft202012Validator(schema)
        return cls(validator, fast_check(schema) or validator.is_valid)

    def error(self, value: object) -> jsonschema.ValidationError | None:
        """The error refusing ``value`` (the one ``jsonschema`` words best), else None."""
        if self.valid(value):  # the usual case, without collecting errors
            return None
        error: jsonschema.ValidationError | None = best_match(self.validator.iter_errors(value))
        return error


def fast_check(schema: object) -> Check | None:
    """``schema`` as a function ``value -> True`` when ``value`` is valid (False: ask
    ``jsonschema``), or None when it says something the fast check may read otherwise."""
    if not _same_in_both(schema):
        return None
    formats: _Formats = {}
    try:
        validate = fastjsonschema.compile(
            cast(dict[str, Any] | bool, _compiled_form(schema, formats)),
            use_default=False,
            formats=cast(dict[str, Callable[[Any], bool]], formats),
        )
    except fastjsonschema.JsonSchemaDefinitionException:
        return None  # one it refuses to compile (a required property none may have)

    def valid(value: Any) -> bool:
        try:
            validate(value)
        except fastjsonschema.JsonSchemaException:
            return False
        return True

    return valid


def _annotation(keyword: str) -> bool:
    """A keyword that never refuses a value: an annotation or an extension."""
    return keyword in _ANNOTATIONS or keyword.startswith("x-")


def _compiled_form(schema: Any, formats: _Formats) -> Any:
    """``schema`` as ``fastjsonschema`` is given it, its annotations left out and each
    ``pattern`` (and each ``not`` of a pattern or of strings) turned into a format check of
    ours (``formats``): ``fastjsonschema`` reads ``$`` as the end of the text where
    ``jsonschema``'s ``re.search`` also takes it before a final newline, and it answers a
    ``not`` by raising and catching an exception for every valid value (two of them were
    most of a note's check)."""
    if not isinstance(schema, Mapping):
        return schema  # True or False
    out: dict[str, Any] = {}
    checks: list[dict[str, Any]] = []
    for keyword, argument in schema.items():
        if _annotation(keyword):
            continue
        if keyword == "pattern":
            checks.append({"format": _format(formats, re.compile(argument).search)})
        elif keyword == "not" and (negated := _negated(argument)) is not None:
            kind, passes = negated
            checks.append({**kind, "format": _format(formats, passes)})
        elif keyword in ("not", "additionalProperties"):
            out[keyword] = _compiled_form(argument, formats)
        elif keyword in ("allOf", "anyOf", "oneOf"):
            out[keyword] = [_compiled_form(each, formats) for each in argument]
        elif keyword == "properties":
            out[keyword] = {k: _compiled_form(v, formats) for k, v in argument.items()}
        else:
            out[keyword] = argument
    if checks:
        out["allOf"] = [*out.get("allOf", []), *checks]
    return out


def _negated(schema: Any) -> tuple[dict[str, str], Callable[[str], bool]] | None:
    """What ``{"not": schema}`` asks of a value, when ``schema`` is only a pattern (a string
    it does not match), a string with a pattern (anything but a string that matches) or
    only strings (``enum``, ``const``: any value but those): the type it asks for and the
    format check that says the rest. None for any other."""
    if not isinstance(schema, Mapping):
        return None
    said = {k: v for k, v in schema.items() if not _annotation(k)}
    if said.keys() == {"pattern"}:
        search = re.compile(said["pattern"]).search
        return {"type": "string"}, lambda text: search(text) is None
    if said.keys() == {"type", "pattern"} and said["type"] == "string":
        # Not a string that matches: any other value passes (formats see strings only).
        search = re.compile(said["pattern"]).search
        return {}, lambda text: search(text) is None
    if said.keys() in ({"enum"}, {"const"}):  # strings only (_same_in_both)
        members = frozenset(said["enum"] if "enum" in said else [said["const"]])
        return {}, lambda text: text not in members
    return None


def _format(formats: _Formats, check: Callable[[str], object]) -> str:
    """A new format name for ``check``, which passes a string when it answers a true value
    (``fastjsonschema`` applies a format to strings only, as ``pattern`` applies)."""
    name = f"pigeon-{len(formats)}"
    formats[name] = check
    return name


def _same_in_both(schema: object) -> bool:
    """Every keyword of ``schema`` (and its subschemas) read alike by both drafts."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, Mapping):
        return False
    for keyword, argument in schema.items():
        if _annotation(keyword):
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

"""The intake's request rules as JSON Schema: each one in the form the OpenAPI document
publishes it (`pigeon.server.openapi`) AND enforced by the server from the same object,
so that the document cannot say less, or more, than the server checks.

- ``RESOURCE_ID``: an id in a path or a body (`pigeon.server.identifiers.resource_id`);
- ``HEADERS``: ``Idempotency-Key``, ``If-Match``, ``X-Pigeon-Clock`` and
  ``X-Pigeon-Operation-Id`` of a write (``header_refusal`` checks a request's);
- ``BATCH_OPERATION``: one entry of a batch (``entry_refusal``); a batch is answered per
  entry, so an entry outside it gets its own 400 result and the batch goes on;
- ``JSON_VALUE``: what the strict decoder (`pigeon.core.strictjson`) takes anywhere
  in a body: no NUL character, no number beyond a double (nor, unsaid here, nesting
  deeper than ``MAX_JSON_DEPTH`` or a repeated key: no schema says those).

The code checks that name a refusal's problem (``check_key``, ``token``, the clock's)
run first; the schema runs after them, so nothing it refuses gets in under another
reading. A batch entry of only the published fields, each optional one text or null,
is not given to ``BATCH_OPERATION``: the checks before it already say all it says
(`pigeon.server.batch_wire.parse_batch_entry`). tests/server/test_contract_rules.py
checks that every value a schema accepts, those checks accept too, and that an entry
the schema is not asked about is answered as the schema would answer it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any

from pigeon.core.printable import NOT_PRINTABLE_CLASS
from pigeon.core.wire import CLOCK, IDEMPOTENCY_KEY, IF_MATCH, MAX_KEY_LENGTH
from pigeon.server.identifiers import (
    MAX_ENTITY_LENGTH,
    MAX_ETAG_LENGTH,
    MAX_ID_LENGTH,
    MAX_METHOD_LENGTH,
    MAX_OPERATION_ID_LENGTH,
    MAX_PATH_LENGTH,
)
from pigeon.server.schema_check import SchemaCheck

OPERATION_ID = "X-Pigeon-Operation-Id"  # optional: names the operation in "already applied"
# A clock stamp is "<wall ms>-<counter>-<node>" (`pigeon.clock`): what every ledger and
# resource row stores, so each part is bounded.
MAX_NODE_LENGTH = 64
MAX_CLOCK_LENGTH = 27 + MAX_NODE_LENGTH
# Its wall at most the last millisecond of year 9999 and its counter what the fixed-width
# encoding holds (10 digits); both in ASCII digits (int() also took "+1", "1_0", "١").
# Beyond, a stamp was stored as sent and outranked every real one for ever.
MAX_CLOCK_WALL_MS = 253_402_300_799_999
MAX_CLOCK_COUNTER = 9_999_999_999
SCHEMA_REF = "#/components/schemas/"

_NOT_PRINTABLE = f"[{NOT_PRINTABLE_CLASS}]"


def _none_matching(pattern: str) -> dict[str, Any]:
    """``{"not": ...}`` of this: no string that ``pattern`` finds. A bare ``pattern`` under
    ``not`` refuses every value that is not a string (a pattern passes those), null included
    where a field's type allows it."""
    return {"type": "string", "pattern": pattern}


_DOUBLE = sys.float_info.max


def at_most(limit: int) -> str:
    """A regular expression of the decimal numbers from 0 to ``limit`` written with at most
    as many digits as ``limit`` (leading zeros allowed), for a bound no pattern class says."""
    digits = str(limit)
    width = len(digits)
    options = [f"[0-9]{{1,{width - 1}}}"] if width > 1 else []
    for at, digit in enumerate(digits):  # equal up to ``at``, smaller there, any after
        if digit != "0":
            rest = width - at - 1
            tail = f"[0-9]{{{rest}}}" if rest else ""
            options.append(f"{digits[:at]}[0-{int(digit) - 1}]{tail}")
    options.append(digits)
    return "(?:" + "|".join(options) + ")"


def body_text(max_length: int, *, nullable: bool = False) -> dict[str, Any]:
    """Printable text of at most ``max_length`` characters ("" and, if ``nullable``, null:
    not given)."""
    return {
        "type": ["string", "null"] if nullable else "string",
        "maxLength": max_length,
        "not": _none_matching(_NOT_PRINTABLE),
    }


# 1-255 printable characters, no "/" (no path could carry it), not "." or "..".
RESOURCE_ID: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_ID_LENGTH,
    "not": _none_matching(f"[/{NOT_PRINTABLE_CLASS}]"),
    "allOf": [{"not": {"enum": [".", ".."]}}],
}
# An integer id is the id of its decimal text ("42"): at most MAX_ID_LENGTH characters.
INTEGER_ID: dict[str, Any] = {
    "type": "integer",
    "minimum": -(10 ** (MAX_ID_LENGTH - 1) - 1),
    "maximum": 10**MAX_ID_LENGTH - 1,
}


def _key(char: str) -> dict[str, Any]:
    """An Idempotency-Key of ``char`` characters: as sent or, as the IETF draft's
    structured-field string, in double quotes (not counted); 1-255 of them, not only
    spaces."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_KEY_LENGTH + 2,
        "pattern": f"^{char}+$",
        "anyOf": [{"maxLength": MAX_KEY_LENGTH}, {"pattern": '^".*"$'}],
        # "\n" too: "$" also matches before a last newline in Python's expressions.
        "not": _none_matching('^(?: *|" *")$|\n'),
    }


def _clock(char: str) -> dict[str, Any]:
    """A clock stamp, "<wall ms>-<counter>-<node>" (`pigeon.clock`), or "": none."""
    return {
        "type": "string",
        "maxLength": MAX_CLOCK_LENGTH,
        "pattern": (
            # Leading zeros as the server's check takes them: the bound is on the value.
            f"^(?:0*{at_most(MAX_CLOCK_WALL_MS)}-0*{at_most(MAX_CLOCK_COUNTER)}"
            f"-{char}{{0,{MAX_NODE_LENGTH}}})?$"
        ),
        "not": _none_matching("\n"),
    }


# In a JSON body: printable characters. In a header: visible ASCII and the space, what
# HTTP carries as text (RFC 9110; other bytes are opaque data, refused here).
_PRINTABLE_CHAR = f"[^{NOT_PRINTABLE_CLASS}]"
_HEADER_CHAR = "[ -~]"
IDEMPOTENCY_KEY_SCHEMA = _key(_PRINTABLE_CHAR)
CLOCK_SCHEMA = _clock(_PRINTABLE_CHAR)


def header_text(max_length: int) -> dict[str, Any]:
    """A header's text: at most ``max_length`` characters ("": not given)."""
    return {
        "type": "string",
        "maxLength": max_length,
        "pattern": f"^{_HEADER_CHAR}*$",
        "not": _none_matching("\n"),
    }


HEADERS: dict[str, dict[str, Any]] = {
    IDEMPOTENCY_KEY: _key(_HEADER_CHAR),
    IF_MATCH: header_text(MAX_ETAG_LENGTH),
    CLOCK: _clock(_HEADER_CHAR),
    OPERATION_ID: header_text(MAX_OPERATION_ID_LENGTH),
}
# The problem slug each header's refusal has always had.
HEADER_SLUGS = {IDEMPOTENCY_KEY: "bad-idempotency-key", CLOCK: "bad-clock"}

BATCH_OPERATION: dict[str, Any] = {
    "type": "object",
    "required": ["idempotency_key", "method", "path"],
    "additionalProperties": False,
    "properties": {
        "id": body_text(MAX_OPERATION_ID_LENGTH, nullable=True),
        "idempotency_key": IDEMPOTENCY_KEY_SCHEMA
        | {"allOf": [{"not": _none_matching(_NOT_PRINTABLE)}]},
        "type": {"type": ["string", "null"]},
        "entity": body_text(MAX_ENTITY_LENGTH, nullable=True),
        "method": {"type": "string", "minLength": 1, "maxLength": MAX_METHOD_LENGTH},
        "path": {"type": "string", "maxLength": MAX_PATH_LENGTH, "pattern": "^/"},
        "body": {},
        "clock": CLOCK_SCHEMA | {"type": ["string", "null"], "not": _none_matching(_NOT_PRINTABLE)},
        "if_match": body_text(MAX_ETAG_LENGTH, nullable=True),
    },
}

JSON_VALUE: dict[str, Any] = {
    "anyOf": [
        {"type": ["null", "boolean"]},
        {"type": "number", "minimum": -_DOUBLE, "maximum": _DOUBLE},
        {"type": "string", "not": _none_matching("\\u0000")},
        {"type": "array", "items": {"$ref": SCHEMA_REF + "JsonValue"}},
        {
            "type": "object",
            "propertyNames": {"not": _none_matching("\\u0000")},
            "additionalProperties": {"$ref": SCHEMA_REF + "JsonValue"},
        },
    ]
}


@functools.cache
def _validator(name: str) -> SchemaCheck:
    return SchemaCheck.of(BATCH_OPERATION if name == "batch" else HEADERS[name])


def _problem(check: SchemaCheck, value: object) -> str | None:
    error = check.error(value)
    return None if error is None else error.message


def header_refusal(headers: Mapping[str, str]) -> tuple[str, str] | None:
    """(problem slug, detail) refusing a header of a write outside its schema, else None."""
    for name in HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        problem = _problem(_validator(name), value)
        if problem is not None:
            return HEADER_SLUGS.get(name, "bad-header"), f"{name}: {_short(problem)}"
    return None


def entry_refusal(entry: object, index: int) -> str | None:
    """Why batch entry ``index`` is outside ``BATCH_OPERATION``, else None."""
    check = _validator("batch")
    if check.valid(entry):  # every entry of every batch: no more than the check
        return None
    problem = _problem(check, entry)
    return None if problem is None else f"operations[{index}]: {_short(problem)}"


def _short(message: str) -> str:
    # jsonschema's message quotes the schema, whose printable class is 4 KB long.
    return message if len(message) <= 200 else message[:200] + "..."


def components() -> dict[str, Any]:
    """The schemas above as the document's components, for ``$ref``."""
    return {
        "ResourceId": RESOURCE_ID,
        "IntegerId": INTEGER_ID,
        "JsonValue": JSON_VALUE,
        "BatchOperation": BATCH_OPERATION,
    }

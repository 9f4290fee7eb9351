"""Bodies a route must refuse, made from its published request schema and a valid example.

Three kinds:

- bytes no JSON decoder may take (truncated, invalid UTF-8, a duplicated key, ``NaN``,
  nesting deeper than the protocol's limit);
- JSON of the wrong shape: another top-level type, the example without each required
  property, each property given a value of a type its schema does not allow, an unknown
  property where the schema allows none, strings breaking a declared ``pattern``,
  ``minLength`` / ``maxLength``, numbers outside ``minimum`` / ``maximum``, values outside
  an ``enum``;
- random mixes of those, from a seeded generator.

Only bodies the schema refuses are kept (checked with ``jsonschema``, the intake's own
validator): what a route accepts by its schema is no bad payload, whatever the handler
does with it. Deterministic for a seed; no property-testing library needed at run time.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

WRONG: dict[str, Any] = {
    "string": 12345,
    "integer": "12",
    "number": "1.5",
    "boolean": "yes",
    "object": ["not", "an", "object"],
    "array": {"not": "an array"},
    "null": 0,
}
RAW: dict[str, bytes] = {
    "truncated JSON": b'{"a": ',
    "invalid UTF-8": b'{"a": "\xff\xfe"}',
    "a key given twice": b'{"a": 1, "a": 2}',
    "NaN": b'{"a": NaN}',
    "nested 500 deep": b"[" * 500 + b"]" * 500,
    "empty body": b"",
}
UNKNOWN = "rehearse_unknown_property"


@dataclass(frozen=True)
class BadBody:
    """One body to send: ``raw`` bytes as they are, else ``value`` as JSON."""

    label: str
    value: Any = None
    raw: bytes | None = None

    @property
    def content(self) -> bytes:
        return self.raw if self.raw is not None else json.dumps(self.value).encode()


def validator(schema: Mapping[str, Any], document: Mapping[str, Any]) -> Any:
    """A validator of ``schema`` whose ``#/components/...`` references resolve in the
    OpenAPI ``document`` it was published in."""
    rooted = {**schema, "components": document.get("components", {})}
    return jsonschema.Draft202012Validator(rooted)


def bad_bodies(
    schema: Mapping[str, Any] | None,
    example: Any,
    document: Mapping[str, Any],
    rng: random.Random,
    *,
    required: bool = True,
    extra: int = 0,
) -> list[BadBody]:
    """Bodies the route of ``schema`` (None: any JSON) must refuse, around ``example``;
    ``required``: the route needs a body (an empty one is then bad too); ``extra`` random
    mixes besides the systematic ones."""
    found = [BadBody(label, raw=raw) for label, raw in RAW.items() if raw or required]
    if schema is None:
        return found
    check = validator(schema, document)
    candidates = list(_shapes(schema, example))
    candidates += [_mix(candidates, example, rng) for _ in range(extra)]
    seen: set[str] = set()
    for label, value in candidates:
        text = json.dumps(value, sort_keys=True)
        if text not in seen and not check.is_valid(value):
            seen.add(text)
            found.append(BadBody(label, value))
    return found


def _shapes(schema: Mapping[str, Any], example: Any) -> Iterator[tuple[str, Any]]:
    for kind, value in (("array", [example]), ("string", "text"), ("number", 7), ("null", None)):
        yield f"a body that is {kind}", value
    if not isinstance(example, dict):
        return
    yield "an empty object", {}
    for name in schema.get("required", []):
        yield f"without {name!r}", {k: v for k, v in example.items() if k != name}
    if schema.get("additionalProperties") is False:
        yield "an unknown property", {**example, UNKNOWN: 1}
    for name, prop in schema.get("properties", {}).items():
        if isinstance(prop, Mapping):
            for label, value in _values(prop):
                yield f"{name!r} {label}", {**example, name: value}


def _values(prop: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Values breaking one property's schema."""
    declared = prop.get("type")
    types = [declared] if isinstance(declared, str) else list(declared or [])
    for kind, wrong in WRONG.items():
        if types and kind not in types:
            yield f"as {kind}-breaking {type(wrong).__name__}", wrong
    if "pattern" in prop:
        yield "breaking its pattern (blank)", " "
        yield "breaking its pattern (empty)", ""
    if "minLength" in prop:
        yield "below minLength", "x" * max(0, int(prop["minLength"]) - 1)
    if "maxLength" in prop:
        yield "above maxLength", "x" * (int(prop["maxLength"]) + 1)
    if "minimum" in prop:
        yield "below minimum", prop["minimum"] - 1
    if "maximum" in prop:
        yield "above maximum", prop["maximum"] + 1
    if "enum" in prop:
        yield "outside its enum", "rehearse-not-in-enum"
    yield "as a deep list", _deep(40)


def _deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def _mix(candidates: list[tuple[str, Any]], example: Any, rng: random.Random) -> tuple[str, Any]:
    """Two object mutations merged, or one with a random key dropped."""
    objects = [(label, v) for label, v in candidates if isinstance(v, dict)]
    if len(objects) < 2 or not isinstance(example, dict):
        return candidates[rng.randrange(len(candidates))]
    (a_label, a), (b_label, b) = rng.sample(objects, 2)
    merged = {**a, **b}
    if merged and rng.random() < 0.5:
        merged.pop(rng.choice(sorted(merged)))
    return f"{a_label} and {b_label}", merged

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

Each is judged by the schema (``jsonschema``, the intake's own validator): a body it
refuses must be refused (4xx) with nothing written; one it lets through (a schema looser
than the handler, or none at all) is "odd": the app may take or refuse it, never fail on
it (5xx). Deterministic for a seed; no property-testing library needed at run time.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

SAMPLES: dict[str, Any] = {  # a value of each JSON type, put where another is declared
    "string": "text",
    "integer": 12345,
    "number": 1.5,
    "boolean": True,
    "object": {"an": "object"},
    "array": ["an", "array"],
    "null": None,
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


@dataclass(frozen=True)
class Fuzz:
    """A route's mutated bodies: ``refused`` by its published schema (bytes no decoder
    takes among them), ``odd``: the same mutations where the schema lets them through (all
    of them for a route without a schema): an app may take or refuse those, never fail."""

    refused: list[BadBody]
    odd: list[BadBody]


def fuzz(
    schema: Mapping[str, Any] | None,
    example: Any,
    document: Mapping[str, Any],
    rng: random.Random,
    *,
    required: bool = True,
    extra: int = 0,
) -> Fuzz:
    """The mutations of ``example`` for a route of ``schema`` (None: any JSON);
    ``required``: the route needs a body (an empty one is then bad too); ``extra`` random
    mixes besides the systematic ones."""
    refused = [BadBody(label, raw=raw) for label, raw in RAW.items() if raw or required]
    odd: list[BadBody] = []
    check = None if schema is None else validator(schema, document)
    candidates = list(_shapes(schema or {}, example))
    candidates += [_mix(candidates, example, rng) for _ in range(extra)]
    seen: set[str] = set()
    for label, value in candidates:
        text = json.dumps(value, sort_keys=True)
        if text in seen:
            continue
        seen.add(text)
        accepted = check is None or check.is_valid(value)
        (odd if accepted else refused).append(BadBody(label, value))
    return Fuzz(refused, odd)


def bad_bodies(
    schema: Mapping[str, Any] | None,
    example: Any,
    document: Mapping[str, Any],
    rng: random.Random,
    *,
    required: bool = True,
    extra: int = 0,
) -> list[BadBody]:
    """The bodies the route of ``schema`` must refuse (`fuzz`'s ``refused``)."""
    return fuzz(schema, example, document, rng, required=required, extra=extra).refused


def _shapes(schema: Mapping[str, Any], example: Any) -> Iterator[tuple[str, Any]]:
    for kind, value in (("array", [example]), ("string", "text"), ("number", 7), ("null", None)):
        yield f"a body that is {kind}", value
    if not isinstance(example, dict):
        return
    yield "an empty object", {}
    required = schema.get("required", list(example) if not schema else [])
    for name in required:
        yield f"without {name!r}", {k: v for k, v in example.items() if k != name}
    if schema.get("additionalProperties") is False or not schema:
        yield "an unknown property", {**example, UNKNOWN: 1}
    properties = schema.get("properties") or {k: {"type": _kind(v)} for k, v in example.items()}
    for name, prop in properties.items():
        if isinstance(prop, Mapping):
            for label, value in _values(prop):
                yield f"{name!r} {label}", {**example, name: value}


def _kind(value: Any) -> str:
    """The JSON type of ``value``, as a schema names it."""
    kinds: list[tuple[type, str]] = [(bool, "boolean"), (int, "integer"), (float, "number")]
    kinds += [(str, "string"), (list, "array"), (dict, "object")]
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")


def _values(prop: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Values breaking one property's schema."""
    declared = prop.get("type")
    types = {declared} if isinstance(declared, str) else set(declared or [])
    if "number" in types:
        types.add("integer")  # an integer is a number
    for kind, value in SAMPLES.items():
        if kind not in types:
            yield f"as {'an' if kind[0] in 'aeiou' else 'a'} {kind}", value
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

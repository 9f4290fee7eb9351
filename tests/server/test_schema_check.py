"""The fast schema checks say what jsonschema says, value for value: the intake's own
schemas (a batch entry, the write headers, a note) and schemas drawn from the keywords
compiled, on values drawn near and far from them."""

from __future__ import annotations

import functools
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pigeon.reference.notes import NOTE_SCHEMA
from pigeon.server import contract
from pigeon.server.schema_check import Check, SchemaCheck, _compiled_form, fast_check

_TEXT = st.text(
    st.sampled_from(["a", "Z", "0", "9", "-", "/", ".", " ", '"', "\n", "\x00", "\u200b", "é"]),
    max_size=12,
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**300), 10**300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 1.0, 42.0, -0.0, "", ".", "..", "zz", "1-0-n", "9" * 300, "a" * 300]),
    _TEXT,
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(
                [
                    "id",
                    "idempotency_key",
                    "method",
                    "path",
                    "body",
                    "clock",
                    "if_match",
                    "entity",
                    "type",
                    "x",
                ]
            ),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=8,
)
_ENTRY_FIELDS = {
    "idempotency_key": st.one_of(_TEXT, st.sampled_from(["k1", '"k"', " ", "a" * 256])),
    "method": st.one_of(_TEXT, st.just("POST")),
    "path": st.one_of(_TEXT, st.just("/notes")),
    "body": _VALUES,
    "id": st.one_of(st.none(), _TEXT),
    "clock": st.one_of(st.none(), _TEXT, st.just("1700000000000-0-node")),
    "if_match": st.one_of(st.none(), _TEXT),
    "entity": st.one_of(st.none(), _TEXT, st.integers()),
    "type": st.one_of(st.none(), _TEXT, st.booleans()),
}
_ENTRIES = st.fixed_dictionaries(
    {}, optional={**_ENTRY_FIELDS, "extra": _VALUES}
)  # near a batch entry: any subset of its fields, sometimes one more

_SCHEMAS: dict[str, Any] = {
    "batch entry": contract.BATCH_OPERATION,
    "note": NOTE_SCHEMA,
    "resource id": contract.RESOURCE_ID,
    "integer id": contract.INTEGER_ID,
    **{f"header {name}": schema for name, schema in contract.HEADERS.items()},
}


def _same(schema: Any, value: object) -> None:
    check = fast_check(schema)
    if check is None:  # left to jsonschema whole: nothing to compare
        return
    assert check(value) == jsonschema.Draft202012Validator(schema).is_valid(value), value


@functools.cache
def _intake_checks(name: str) -> tuple[Check | None, jsonschema.Draft202012Validator]:
    """The fast check and jsonschema's validator of one of the intake's schemas, made once
    for all the values drawn: compiling costs some 20 ms, and gives the same check again."""
    return fast_check(_SCHEMAS[name]), jsonschema.Draft202012Validator(_SCHEMAS[name])


@pytest.mark.parametrize("name", sorted(_SCHEMAS))
@settings(max_examples=300, deadline=None)
@given(value=st.one_of(_VALUES, _ENTRIES, _TEXT))
def test_the_intake_schemas_say_what_jsonschema_says(name: str, value: object) -> None:
    check, validator = _intake_checks(name)
    assert check is not None  # every one of them compiled
    assert check(value) == validator.is_valid(value), value


_LEAF_SCHEMAS = st.one_of(
    st.booleans(),
    st.builds(
        lambda t: {"type": t},
        st.sampled_from(
            [
                "string",
                "integer",
                "number",
                "null",
                "boolean",
                "object",
                "array",
                ["string", "null"],
                ["integer", "string"],
            ]
        ),
    ),
    st.builds(lambda n: {"minLength": n}, st.integers(0, 3)),
    st.builds(lambda n: {"maxLength": n}, st.integers(0, 3)),
    st.builds(lambda p: {"pattern": p}, st.sampled_from(["^a", "a$", "[/.]", "^$", "\n"])),
    st.builds(lambda n: {"minimum": n}, st.one_of(st.integers(-3, 3), st.floats(-3, 3))),
    st.builds(lambda n: {"maximum": n}, st.one_of(st.integers(-3, 3), st.floats(-3, 3))),
    st.builds(lambda m: {"enum": m}, st.lists(_TEXT, max_size=3)),
    st.builds(lambda c: {"const": c}, _TEXT),
    st.builds(lambda r: {"required": r}, st.lists(st.sampled_from(["id", "x"]), unique=True)),
)
_GENERATED = st.recursive(
    _LEAF_SCHEMAS,
    lambda inner: st.one_of(
        st.builds(lambda s: {"not": s}, inner),
        st.builds(lambda s: {"allOf": s}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda s: {"anyOf": s}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(
            lambda props, extra: {"properties": props, "additionalProperties": extra},
            st.dictionaries(st.sampled_from(["id", "x", "body"]), inner, max_size=2),
            st.booleans(),
        ),
        st.builds(
            lambda a, b: {**a, **b, "x-note": 1, "title": "t"},
            inner.filter(lambda s: isinstance(s, dict)),
            inner.filter(lambda s: isinstance(s, dict)),
        ),
    ),
    max_leaves=6,
)


@settings(max_examples=500, deadline=None)
@given(schema=_GENERATED, value=st.one_of(_VALUES, _ENTRIES))
def test_each_keyword_says_what_jsonschema_says(schema: Any, value: object) -> None:
    _same(schema, value)


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/components/schemas/JsonValue"},
        {"items": {"type": "string"}},
        {"properties": {"a": {"type": "string"}}, "patternProperties": {"^x": {}}},
        {"minimum": float("nan")},
        {"maxLength": 1.5},
        {"enum": [1, "a"]},
        {"type": "decimal"},
        {"anyOf": [{"propertyNames": {"pattern": "a"}}]},
        {"required": ["id"], "additionalProperties": False},  # fastjsonschema: no such schema
    ],
)
def test_a_schema_beyond_the_compiled_keywords_is_left_to_jsonschema(schema: Any) -> None:
    assert fast_check(schema) is None


def test_a_refused_entry_is_worded_by_jsonschema() -> None:
    entry = {"idempotency_key": "k", "method": "POST", "path": "/notes", "extra": 1}
    refused = contract.entry_refusal(entry, 3)
    assert (
        refused == "operations[3]: Additional properties are not allowed ('extra' was unexpected)"
    )


@pytest.mark.parametrize("keyword", ["minLength", "maxLength", "minimum", "maximum"])
def test_a_bound_that_compares_false_either_way_is_left_to_jsonschema(keyword: str) -> None:
    # NaN: neither "below" nor "at least"; left to jsonschema, which reads it so.
    assert fast_check({"not": {keyword: float("nan")}}) is None
    assert fast_check({keyword: float("nan")}) is None


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"pattern": "^a$"}, "a\n"),  # jsonschema: "$" also matches before a final newline
        ({"not": {"pattern": "^a$"}}, "a\n"),
        ({"not": {"pattern": "a$"}}, "ba\n"),
        ({"not": {"pattern": "^a$", "title": "t"}}, "a"),
        ({"not": {"pattern": "b"}}, 7),  # a pattern passes a non-string: its "not" refuses
        ({"not": {"enum": ["a", "b"]}}, "a"),
        ({"not": {"enum": ["a", "b"]}}, 1),
        ({"not": {"const": "."}}, "."),
        ({"not": {"type": "string", "pattern": "b"}}, "abc"),  # a string that matches
        ({"not": {"type": "string", "pattern": "b"}}, "a"),
        ({"not": {"type": "string", "pattern": "b"}}, None),  # not a string: passes
        ({"type": ["string", "null"], "not": {"type": "string", "pattern": "b"}}, None),
        ({"type": "string", "format": "email"}, "no address"),  # an annotation here
    ],
)
def test_patterns_and_their_negations_read_as_jsonschema_reads_them(
    schema: Any, value: object
) -> None:
    assert fast_check(schema) is not None
    _same(schema, value)


@pytest.mark.parametrize(
    ("schema", "fast", "message"),
    [
        (
            {"type": "object", "required": ["a"], "properties": {"b": {"type": "string"}}},
            True,
            "2 is not of type 'string'",
        ),
        # A keyword the fast check does not compile: jsonschema alone, the same answers.
        (
            {"type": "object", "required": ["a"], "dependentRequired": {"b": ["c"]}},
            False,
            "'c' is a dependency of 'b'",
        ),
    ],
)
def test_a_schema_check_words_refusals_as_jsonschema_does(
    schema: dict[str, Any], fast: bool, message: str
) -> None:
    check = SchemaCheck.of(schema)
    assert (check.valid != check.validator.is_valid) is fast
    assert check.error({"a": 1}) is None
    for value, words in [({}, "'a' is a required property"), ({"a": 1, "b": 2}, message)]:
        error = check.error(value)
        assert error is not None and error.message == words


@pytest.mark.parametrize(
    "schema",
    [contract.BATCH_OPERATION, contract.RESOURCE_ID, *contract.HEADERS.values()],
    ids=["batch", "resource-id", *contract.HEADERS],
)
def test_every_negation_in_the_intake_schemas_compiles_to_a_format_check(schema: Any) -> None:
    # fastjsonschema answers a "not" by raising and catching for every valid value: each
    # of the intake's is a pattern or strings, which the compiled form checks directly.
    def negations(node: object) -> int:
        if isinstance(node, dict):
            return ("not" in node) + sum(map(negations, node.values()))
        return sum(map(negations, node)) if isinstance(node, list) else 0

    assert negations(_compiled_form(schema, {})) == 0

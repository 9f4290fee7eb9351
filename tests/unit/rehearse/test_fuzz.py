"""The bad bodies of a route: each one its published schema refuses, made from it."""

from __future__ import annotations

import random

import pytest

from pigeon.reference.answers import ANSWER_SCHEMA
from pigeon.rehearse.fuzz import RAW, bad_bodies, fuzz, validator

EXAMPLE = ANSWER_SCHEMA["examples"][0]
DOCUMENT = {"components": {"schemas": {"Id": {"type": "string", "minLength": 1}}}}


def test_every_json_body_is_refused_by_the_schema_and_the_example_is_not() -> None:
    check = validator(ANSWER_SCHEMA, DOCUMENT)
    assert check.is_valid(EXAMPLE)
    bodies = bad_bodies(ANSWER_SCHEMA, EXAMPLE, DOCUMENT, random.Random(1), extra=20)
    values = [b for b in bodies if b.raw is None]
    assert len(values) > 20
    assert all(not check.is_valid(b.value) for b in values)


def test_each_required_property_is_left_out_once_and_each_property_breaks() -> None:
    labels = {b.label for b in bad_bodies(ANSWER_SCHEMA, EXAMPLE, DOCUMENT, random.Random(1))}
    assert {"without 'question'", "without 'answer'", "an unknown property"} <= labels
    assert "'answer' breaking its pattern (blank)" in labels
    assert {"'expected' as an integer", "'question' as a null"} <= labels


def test_the_same_seed_makes_the_same_bodies() -> None:
    def made(seed: int) -> list[bytes]:
        return [
            b.content
            for b in bad_bodies(ANSWER_SCHEMA, EXAMPLE, DOCUMENT, random.Random(seed), extra=8)
        ]

    assert made(3) == made(3)


@pytest.mark.parametrize("required", [True, False])
def test_a_route_without_a_schema_gets_the_bytes_no_decoder_takes(required: bool) -> None:
    bodies = bad_bodies(None, None, DOCUMENT, random.Random(0), required=required)
    assert {b.label for b in bodies} == {label for label, raw in RAW.items() if raw or required}
    assert all(b.content == RAW[b.label] for b in bodies)


def test_references_resolve_in_the_document_the_schema_came_from() -> None:
    schema = {"type": "object", "properties": {"id": {"$ref": "#/components/schemas/Id"}}}
    check = validator(schema, DOCUMENT)
    assert check.is_valid({"id": "a"}) and not check.is_valid({"id": ""})


def test_what_a_loose_schema_lets_through_is_odd_not_bad() -> None:
    loose = {"type": "object", "required": ["answer"], "properties": {"answer": {}}}
    found = fuzz(loose, {"answer": "4"}, DOCUMENT, random.Random(0))
    assert {b.label for b in found.odd} >= {"'answer' as an integer", "'answer' as a deep list"}
    check = validator(loose, DOCUMENT)
    assert all(check.is_valid(b.value) for b in found.odd)
    assert all(b.raw is not None or not check.is_valid(b.value) for b in found.refused)


def test_without_a_schema_every_shape_of_the_example_is_odd() -> None:
    found = fuzz(None, {"n": 1, "tags": ["a"]}, DOCUMENT, random.Random(0))
    labels = {b.label for b in found.odd}
    assert {"without 'n'", "'n' as a string", "'tags' as an object"} <= labels
    assert "'n' as an integer" not in labels and "'tags' as an array" not in labels
    assert {b.label for b in found.refused} == set(RAW)

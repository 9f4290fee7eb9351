"""canonical_json: the text every fingerprint and stored answer is made of, byte for byte
what ``json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
writes, refusals included, however it is made; and without_member, that text with one
member cut out, which must be what canonical_json writes without it, or nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pigeon.core.wire import CanonicalJson, canonical_json, without_member

_REFERENCE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_text_is_the_reference_encoders(value: Any) -> None:
    assert canonical_json(value) == _REFERENCE.encode(value)


def test_canonical_text_is_returned_as_it_is() -> None:
    text = CanonicalJson('{"a":1}')
    assert canonical_json(text) == '{"a":1}' and type(canonical_json(text)) is str


def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    "value", [_circular(), {"a": object()}, {1: 2, "1": 3}], ids=["circular", "object", "keys"]
)
def test_what_the_reference_refuses_is_refused_alike(value: Any) -> None:
    with pytest.raises(Exception) as reference:
        _REFERENCE.encode(value)
    with pytest.raises(type(reference.value)) as ours:
        canonical_json(value)
    assert str(ours.value) == str(reference.value)


# Keys that quote the member's own text, or hold it after an escaped quote.
_TRICKY_KEYS = st.sampled_from(["id", 'a"id', "id\\", '"id":"v"', "i", "ie", ""]) | st.text()


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(_TRICKY_KEYS, json_values, max_size=5),
    st.sampled_from(["v", "", 'say "v"', "\\", "é"]) | st.text(),
    st.booleans(),
)
def test_a_member_cut_out_leaves_the_text_of_the_object_without_it(
    rest: dict[str, Any], value: str, nested: bool
) -> None:
    """Wherever else the member's text appears (a nested object's own "id", a key that
    quotes it), the answer is the encode of the object without the member, or None."""
    if nested:
        rest = {**rest, "inner": {"id": value}}
    whole = {**rest, "id": value}
    without = {k: v for k, v in whole.items() if k != "id"}
    cut = without_member(canonical_json(whole), "id", value)
    assert cut is None or cut == canonical_json(without)
    if nested:
        assert cut is None  # the nested one is the same text: only an encode tells


@pytest.mark.parametrize(
    "whole",
    [
        {"id": "n1"},
        {"id": "n1", "title": "t"},
        {"body": "b", "id": "n1"},
        {"body": "b", "id": "n1", "title": "t"},
        {"a": {"ids": ["n1"]}, "id": "n1", "z": [1.5, None]},
    ],
)
def test_a_member_found_once_is_cut_with_its_comma(whole: dict[str, Any]) -> None:
    without = {k: v for k, v in whole.items() if k != "id"}
    assert without_member(canonical_json(whole), "id", "n1") == canonical_json(without)

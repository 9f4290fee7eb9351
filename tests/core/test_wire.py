"""canonical_json: the text every fingerprint and stored answer is made of, byte for byte
what ``json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
writes, refusals included, however it is made."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pigeon.core.wire import CanonicalJson, canonical_json

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

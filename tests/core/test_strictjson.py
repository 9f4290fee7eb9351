"""The strict JSON decoder: properties over generated documents, hostile and not."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from pigeon.core.strictjson import (
    MAX_JSON_DEPTH,
    JsonRefused,
    TooManyItems,
    loads,
    loads_members,
)

# Text a store keeps: no lone surrogates (Cs), no NUL.
clean_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
finite = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | finite | clean_text
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(clean_text, inner, max_size=5),
    max_leaves=30,
)


@given(documents, st.booleans(), st.sampled_from([None, 2]))
def test_every_json_document_a_store_can_keep_is_read_exactly(
    value: Any, ascii_only: bool, indent: int | None
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    assert loads(text) == value
    assert loads(text.encode("utf-8")) == value
    assert loads_members(text, member="m", max_items=10**6) == value


@given(st.text(), st.binary())
def test_anything_else_is_refused_with_json_refused_only(text: str, raw: bytes) -> None:
    for data in (text, raw):
        try:
            loads(data)
        except JsonRefused as exc:
            assert exc.problem and str(exc)
        try:
            loads_members(data, member="operations", max_items=3)
        except JsonRefused as exc:
            assert exc.problem and str(exc)


@given(st.dictionaries(clean_text, documents, min_size=1, max_size=5), st.data())
def test_a_repeated_key_is_refused_at_any_depth(obj: dict[str, Any], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(obj)))
    body = json.dumps(obj)[:-1] + ", " + json.dumps(key) + ": 1}"
    nested = data.draw(st.integers(0, 3))
    body = "[" * nested + body + "]" * nested
    with pytest.raises(JsonRefused) as refused:
        loads(body)
    assert refused.value.problem == "duplicate-key"
    with pytest.raises(JsonRefused):
        loads_members('{"operations": [' + body + "]}", member="operations", max_items=5)


@given(documents, st.integers(0xD800, 0xDFFF), st.booleans())
def test_a_lone_surrogate_is_refused_wherever_it_sits(value: Any, code: int, as_key: bool) -> None:
    lone = json.dumps(chr(code))  # "\\udXXX": json.dumps escapes it
    inner = f"{{{lone}: 1}}" if as_key else lone
    for body in (f"[{json.dumps(value)}, {inner}]", f'{{"operations": [{inner}]}}'):
        with pytest.raises(JsonRefused) as refused:
            loads_members(body, member="operations", max_items=5)
        assert refused.value.problem == "lone-surrogate"


@given(clean_text, clean_text, st.integers(0, 3))
def test_nul_is_refused_and_an_escaped_backslash_before_u0000_is_not_one(
    before: str, after: str, backslashes: int
) -> None:
    body = json.dumps(before)[:-1] + "\\\\" * backslashes + "\\u0000" + json.dumps(after)[1:]
    with pytest.raises(JsonRefused) as refused:
        loads(body)
    assert refused.value.problem == "nul"
    text = json.dumps(before)[:-1] + "\\\\" * (backslashes + 1) + "u0000" + json.dumps(after)[1:]
    assert loads(text) == before + "\\" * (backslashes + 1) + "u0000" + after


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(constant: str) -> None:
    with pytest.raises(JsonRefused) as refused:
        loads(f'{{"v": [{constant}]}}')
    assert refused.value.problem == "constant"


@given(st.integers(309, 5000), st.sampled_from(["1e", "-1e", "1.5E+", "9" * 400 + "e"]))
def test_numbers_beyond_a_double_are_refused(exponent: int, mantissa: str) -> None:
    number = mantissa + str(exponent) if mantissa.endswith(("e", "E+")) else mantissa
    assume(not math.isfinite(float(number)))
    with pytest.raises(JsonRefused) as refused:
        loads(f"[{number}]")
    assert refused.value.problem == "number-range"
    with pytest.raises(JsonRefused):
        loads("[" + "9" * 400 + "]")


@given(st.integers(1, MAX_JSON_DEPTH + 50), st.sampled_from("[{"), st.integers(0, 2))
# At the limit and one past it, in the fewest characters: the length shortcut's edge.
@example(MAX_JSON_DEPTH, "[", 0)
@example(MAX_JSON_DEPTH + 1, "[", 0)
@example(MAX_JSON_DEPTH - 1, "[", 1)
@example(MAX_JSON_DEPTH, "[", 1)
@example(MAX_JSON_DEPTH - 2, "[", 2)
@example(MAX_JSON_DEPTH - 1, "[", 2)
def test_depth_is_bounded_wherever_the_value_sits(depth: int, bracket: str, outer: int) -> None:
    close = {"[": "]", "{": "}"}[bracket]
    inner = (
        ('{"a":' * (depth - 1) + "{}" + "}" * (depth - 1))
        if bracket == "{"
        else ("[" * depth + close * depth)
    )
    wrapped = {0: inner, 1: f'{{"x": {inner}}}', 2: f'{{"operations": [{inner}]}}'}[outer]
    levels = depth + outer
    for decode in (loads, lambda d: loads_members(d, member="operations", max_items=9)):
        if levels > MAX_JSON_DEPTH:
            with pytest.raises(JsonRefused) as refused:
                decode(wrapped)
            assert refused.value.problem == "too-deep"
        else:
            decode(wrapped)


@given(
    st.lists(documents, max_size=12),
    st.integers(0, 12),
    st.dictionaries(clean_text, documents, max_size=3),
)
def test_the_array_member_is_refused_exactly_past_its_limit(
    items: list[Any], limit: int, others: dict[str, Any]
) -> None:
    others.pop("operations", None)
    doc = json.dumps({**others, "operations": items})
    if len(items) > limit:
        with pytest.raises(TooManyItems):
            loads_members(doc, member="operations", max_items=limit)
    else:
        assert loads_members(doc, member="operations", max_items=limit) == json.loads(doc)


def test_a_huge_batch_of_tiny_entries_is_refused_after_the_limit() -> None:
    body = '{"operations": [' + ",".join(["{}"] * 2_000_000) + "]}"
    with pytest.raises(TooManyItems) as refused:
        loads_members(body, member="operations", max_items=1000)
    assert "at most 1000" in str(refused.value)


def test_a_repeated_top_level_key_of_a_batch_is_refused() -> None:
    with pytest.raises(JsonRefused) as refused:
        loads_members('{"operations": [], "operations": [1]}', member="operations", max_items=5)
    assert refused.value.problem == "duplicate-key"


@given(st.lists(documents, max_size=6), st.data())
def test_a_batch_array_is_refused_where_and_as_the_whole_document_is(
    items: list[Any], data: st.DataObject
) -> None:
    # Read element by element, an array's syntax errors are worded and placed as the
    # scanner words and places them reading the document whole.
    text = json.dumps({"operations": items}, indent=data.draw(st.sampled_from([None, 1])))
    at = data.draw(st.integers(0, len(text)))
    text = text[:at] + data.draw(st.sampled_from(["x", ",", "]", ":", "[", "}", '"'])) + text[at:]
    try:
        loads(text)
    except JsonRefused as whole:
        if whole.problem == "syntax":
            with pytest.raises(JsonRefused) as read:
                loads_members(text, member="operations", max_items=10)
            assert (read.value.problem, str(read.value)) == ("syntax", str(whole))


@pytest.mark.parametrize(
    "text",
    [
        '{"operations": [1 \n x]}',
        '{"operations": [1\n, 2 x]}',
        '{"operations": [1 2]}',
        '{"operations": [1, ]}',
        '{"operations": [1 ,\n 2 \n',
    ],
)
def test_a_batch_array_s_syntax_error_is_placed_past_the_blanks(text: str) -> None:
    with pytest.raises(JsonRefused) as whole:
        loads(text)
    with pytest.raises(JsonRefused) as read:
        loads_members(text, member="operations", max_items=10)
    assert str(read.value) == str(whole.value)

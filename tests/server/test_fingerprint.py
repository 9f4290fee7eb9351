"""Key shape and request fingerprint: pure rules, checked by properties."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pigeon.server.fingerprint import InvalidIdempotencyKey, check_key, fingerprint, validate_key

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def _shuffled(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@given(json_values, st.integers())
def test_key_order_and_whitespace_do_not_change_the_fingerprint(value: Any, seed: int) -> None:
    reordered = _shuffled(value, random.Random(seed))
    spaced = json.loads(json.dumps(reordered, indent=seed % 5))
    assert fingerprint("POST", "/notes", value) == fingerprint("post", "/notes", spaced)


@given(json_values, json_values)
def test_different_bodies_have_different_fingerprints(a: Any, b: Any) -> None:
    same = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert (fingerprint("POST", "/notes", a) == fingerprint("POST", "/notes", b)) == same


def test_method_and_path_are_part_of_the_fingerprint() -> None:
    body = {"id": "1"}
    prints = {
        fingerprint("POST", "/notes", body),
        fingerprint("PUT", "/notes", body),
        fingerprint("POST", "/notes/1", body),
    }
    assert len(prints) == 3


def _plain_key(key: str) -> bool:
    return key.strip() == key and key.isprintable() and not (key[0] == key[-1] == '"')


@given(st.text(min_size=1, max_size=255).filter(_plain_key))
def test_any_printable_key_up_to_255_is_accepted(key: str) -> None:
    assert validate_key([key]) == key


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([], "required"),
        ([""], "empty"),
        (["   "], "empty"),
        (["k" * 256], "256 characters"),
        (["a", "b"], "appeared 2 times"),
        (["a\x00b"], "printable"),
    ],
)
def test_bad_keys_are_refused_with_a_message_naming_the_problem(
    values: list[str], message: str
) -> None:
    with pytest.raises(InvalidIdempotencyKey, match=message):
        validate_key(values)


def test_a_quoted_key_is_the_same_key() -> None:
    assert validate_key(['"abc-1"']) == validate_key(["abc-1"]) == "abc-1"
    with pytest.raises(InvalidIdempotencyKey, match="empty"):
        validate_key(['""'])


def test_a_batch_key_must_be_a_string() -> None:
    with pytest.raises(InvalidIdempotencyKey, match="must be a string"):
        check_key(42)

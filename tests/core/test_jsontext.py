"""one_encoder: one C encoder built once writes what its reference ``JSONEncoder`` writes,
byte for byte, and refuses what it refuses with the same error, for every setting the
edge and the server encode with; shared by threads, and still right after a refusal."""

from __future__ import annotations

import json
import threading
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pigeon.core.jsontext import one_encoder

REFERENCES = {
    "canonical": json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False),
    "ascii, default=str": json.JSONEncoder(default=str, separators=(",", ":")),
    "no NaN": json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")),
    "no circular check": json.JSONEncoder(check_circular=False),
    "skipkeys": json.JSONEncoder(skipkeys=True, sort_keys=True),
}

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
    | st.decimals(allow_nan=False, places=2),  # encoded by default=str, refused otherwise
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text() | st.integers(0, 9) | st.none(), inner, max_size=4)
    ),
    max_leaves=20,
)


def _outcome(encode: Any, value: Any) -> tuple[str, str]:
    try:
        return "text", encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("name", REFERENCES)
@settings(max_examples=200, deadline=None)
@given(value=values)
def test_the_text_and_the_refusals_are_the_references(name: str, value: Any) -> None:
    reference = REFERENCES[name]
    assert _outcome(one_encoder(reference), value) == _outcome(reference.encode, value)


def _loop() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = [loop]
    return loop


def _deep() -> list[Any]:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    return deep


@pytest.mark.parametrize("name", REFERENCES)
@pytest.mark.parametrize(
    "value",
    [_loop(), _deep(), {"a": object()}, {"n": float("nan")}, {1: 2, "1": 3}, {(1,): 2}],
    ids=["loop", "deep", "object", "nan", "mixed keys", "tuple key"],
)
def test_a_refused_value_is_refused_alike_and_the_encoder_goes_on(name: str, value: Any) -> None:
    reference = REFERENCES[name]
    encode = one_encoder(reference)
    assert _outcome(encode, value) == _outcome(reference.encode, value)
    after = {"b": [1, Decimal("2.5") if name == "ascii, default=str" else 2], "a": "é"}
    assert encode(after) == reference.encode(after)


def test_threads_share_one_encoder() -> None:
    encode = one_encoder(REFERENCES["canonical"])
    values = [{"i": i, "nested": {"z": [i] * (i % 7), "a": str(i)}} for i in range(200)]
    expected = [REFERENCES["canonical"].encode(v) for v in values]
    got: list[list[str]] = []

    def run() -> None:
        got.append([encode(v) for _ in range(20) for v in values][-len(values) :])

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == [expected] * 4

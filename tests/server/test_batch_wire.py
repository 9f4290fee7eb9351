"""A batch's answer as bytes: the results written as JSON text, each stored body spliced in."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from pigeon.core.printable import printable
from pigeon.server import batch_wire
from pigeon.server.batch_wire import parse_batch_entry, results_json
from pigeon.server.identifiers import InvalidIdentifier, is_token, token
from pigeon.server.results import OpResult

COMPACT: dict[str, Any] = {"ensure_ascii": False, "separators": (",", ":")}
texts = st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)
documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
results = st.builds(
    OpResult,
    status=st.integers(100, 599),
    body_text=st.just("") | documents.map(lambda doc: json.dumps(doc, **COMPACT)),
    # A name twice: the last value, as a dict of them says.
    headers=st.lists(st.tuples(st.sampled_from(["etag", "location", "x-é"]), texts)).map(tuple),
    replayed=st.booleans(),
)


@given(st.lists(st.none() | texts, max_size=80), st.lists(results, max_size=80))
def test_the_answer_is_the_json_of_each_result_with_its_body_spliced_in(
    ids: list[str | None], answered: list[OpResult]
) -> None:
    expected: list[dict[str, Any]] = [
        {
            "body": json.loads(result.body_text) if result.body_text else None,
            "id": op_id,
            "status": result.status,
            "replayed": result.replayed,
            "headers": dict(result.headers),
        }
        for op_id, result in zip(ids, answered, strict=False)
    ]
    written = results_json(ids, list(answered))
    # Byte for byte what one encoder of the whole answer writes (compact, UTF-8).
    assert bytes(written) == json.dumps({"results": expected}, **COMPACT).encode("utf-8")


@given(st.lists(st.text(st.sampled_from("/a%2F.é?#\x00 "), max_size=300), max_size=6))
@example(["a%2F", "a%2", "a", "a/.", "a/..", "x" * 300])
def test_entry_paths_read_before_are_read_as_the_first_time(paths: list[str]) -> None:
    def parsed(path: str) -> object:
        return parse_batch_entry({"idempotency_key": "k", "method": "PUT", "path": path}, 0)

    paths = ["/" + path for path in paths]
    batch_wire._PATHS.clear()
    remembered = [parsed(path) for path in paths + paths]
    fresh = []
    for path in paths + paths:
        batch_wire._PATHS.clear()
        fresh.append(parsed(path))
    assert remembered == fresh


def _a_token(value: object, limit: int) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= limit and printable(value)


def _tokens_by_the_rule(entry: dict[str, Any], index: int) -> tuple[object, ...] | str:
    """What ``_tokens`` must say of an entry, by the rule written out here (a token is a
    string of 1 to its limit of printable characters; "", null or another falsy value is
    not given): the three values, or the first refused one's message, which is ``token``'s
    (and ``token`` must refuse it)."""
    fields = (("id", 255), ("entity", 512), ("if_match", 255))
    for name, limit in fields:
        value = entry.get(name)
        if value and not _a_token(value, limit):
            try:
                token(value, f"operations[{index}].{name}", limit)
            except InvalidIdentifier as exc:
                return str(exc)
            raise AssertionError(f"token took {value!r}, which the rule refuses")
    return tuple(entry.get(name) or None for name, _ in fields)


def _near(limit: int) -> st.SearchStrategy[str]:
    return st.integers(limit - 1, limit + 1).flatmap(
        lambda n: st.sampled_from(["a", "é", "\x00", "\u2028"]).map(lambda c: "b" * (n - 1) + c)
    )


token_values = (
    st.none()
    | st.just("")
    | st.sampled_from([0, False, 1, True, [], ["x"], {}, 2.5])
    | st.text(st.characters(blacklist_categories=["Cs"]), max_size=8)
    | _near(255)
    | _near(512)
)


token_fields = dict.fromkeys(("id", "entity", "if_match"), token_values)
entries = st.fixed_dictionaries({}, optional=token_fields)


@given(entries)
def test_an_entrys_id_entity_and_if_match_are_read_by_the_token_rule(
    entry: dict[str, Any],
) -> None:
    expected = _tokens_by_the_rule(entry, 7)
    try:
        got: tuple[object, ...] | str = batch_wire._tokens(entry, 7)
    except InvalidIdentifier as exc:
        got = str(exc)
    assert got == expected
    for name, limit in (("id", 255), ("entity", 512), ("if_match", 255)):
        if name in entry:  # "" included: what token itself takes unchanged
            assert is_token(entry[name], limit) is _a_token(entry[name], limit)

"""The published rules and the server's checks are the same rules.

Each rule the server checks in code (a key, an id, a clock stamp, a header) is published
as a JSON Schema (`pigeon.server.contract`) that the server also enforces; here each
schema, as two validators read it (Python's jsonschema, as the server does, and the
Rust one schemathesis uses), gives the same verdict as the code on the values that tell
rules apart. And every route of the app is in the document with the rules it enforces:
a route whose server-side rule is missing from the document fails here (and, for the
rules a generator can reach, in tests/server/test_fuzz.py).
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Callable
from typing import Any

import jsonschema
import jsonschema_rs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.routing import Route

from pigeon.core import printable as pr
from pigeon.core.wire import CLOCK, IDEMPOTENCY_KEY, IF_MATCH
from pigeon.exceptions import InvalidIdempotencyKey
from pigeon.reference.notes import create_notes_app
from pigeon.server import batch_wire, contract, messages
from pigeon.server.access import Guarded
from pigeon.server.contract import MAX_CLOCK_COUNTER, MAX_CLOCK_WALL_MS, MAX_NODE_LENGTH
from pigeon.server.fingerprint import check_key
from pigeon.server.identifiers import InvalidIdentifier, resource_id, token
from pigeon.server.messages import read_clock
from pigeon.server.openapi import OPENAPI_PATH
from pigeon.server.results import OpResult
from pigeon.storage.base import Database

from .conftest import TestClient

RULES = settings(max_examples=400, deadline=None, derandomize=True)
# Characters that tell the rules apart: quotes, spaces, digits and dashes (keys, clock
# stamps), slashes and dots (ids), controls, separators, format and non-ASCII ones.
_TELLING = "\"' -/.09az~\x00\t\n\x7f\x85\xa0\xad\xe9\u2028\u202e\u200d\ufeff\ue000\uffff東😀"
values = st.one_of(
    st.text(alphabet=_TELLING, max_size=8),
    st.builds(
        lambda c, n, q: q + c * n + q,
        st.sampled_from("a é"),
        st.sampled_from([253, 254, 255, 256, 257]),
        st.sampled_from(["", '"']),
    ),
    st.from_regex(r"\A[0-9]{1,16}-[0-9]{1,11}-[ -~]{0,66}\Z"),
)


def _verdicts(schema: dict[str, Any]) -> Callable[[object], bool]:
    """The schema's verdict, checked to be the same for both validators."""
    return _made(json.dumps(schema, sort_keys=True))


@functools.cache
def _made(schema: str) -> Callable[[object], bool]:
    """Both validators of a schema (its JSON), built once for all the values drawn."""
    python = jsonschema.Draft202012Validator(json.loads(schema)).is_valid
    rust = jsonschema_rs.validator_for(json.loads(schema)).is_valid

    def valid(value: object) -> bool:
        verdict = python(value)
        assert rust(value) == verdict, (value, verdict)
        return verdict

    return valid


def _accepts(check: Callable[[Any], object], value: object) -> bool:
    try:
        result = check(value)
    except (InvalidIdempotencyKey, InvalidIdentifier):
        return False
    return not isinstance(result, OpResult)


def test_the_printable_table_refuses_only_what_python_calls_unprintable() -> None:
    refused = [c for first, last in pr.NOT_PRINTABLE_RANGES for c in range(first, last + 1)]
    assert not any(chr(c).isprintable() for c in refused)
    if unicodedata.unidata_version != pr.UNICODE_VERSION:
        pytest.skip(f"the table is Unicode {pr.UNICODE_VERSION}'s")
    expected = {
        c
        for c in range(0x10000)
        if (unicodedata.category(chr(c)) in pr.REFUSED_CATEGORIES and c != 0x20)
        or 0xFDD0 <= c <= 0xFDEF
        or c in (0xFFFE, 0xFFFF)
    }
    assert set(refused) == expected


@given(values)
@RULES
def test_a_key_is_valid_by_the_document_exactly_when_the_server_takes_it(value: str) -> None:
    body_key = _verdicts(contract.IDEMPOTENCY_KEY_SCHEMA)
    header_key = _verdicts(contract.HEADERS[IDEMPOTENCY_KEY])
    accepted = _accepts(check_key, value)
    assert body_key(value) == accepted, value
    assert header_key(value) == (accepted and value.isascii()), value


@given(values)
@RULES
def test_an_id_is_valid_by_the_document_exactly_when_the_server_takes_it(value: str) -> None:
    assert _verdicts(contract.RESOURCE_ID)(value) == _accepts(resource_id, value), value


@given(values)
@RULES
def test_a_clock_stamp_the_document_allows_is_one_the_server_takes(value: str) -> None:
    if _verdicts(contract.CLOCK_SCHEMA)(value):
        assert _accepts(read_clock, value), value
    if _verdicts(contract.HEADERS[CLOCK])(value):
        assert _accepts(read_clock, value) and value.isascii(), value


def _digits(numbers: st.SearchStrategy[int], widest: int) -> st.SearchStrategy[str]:
    """Numbers written with leading zeros up to ``widest`` digits."""
    return numbers.flatmap(lambda n: st.integers(len(str(n)), widest).map(str(n).zfill))


# Stamps at the edges: each part as long as allowed and one more, walls by the largest.
stamps = st.builds(
    "{}-{}-{}".format,
    _digits(st.integers(0, 10**16) | st.integers(MAX_CLOCK_WALL_MS - 2, MAX_CLOCK_WALL_MS + 2), 17),
    _digits(st.integers(0, 10**11), 12),
    st.integers(0, MAX_NODE_LENGTH + 2).map("n".__mul__) | st.text(_TELLING, max_size=66),
)


@given(values | stamps)
@example(f"{MAX_CLOCK_WALL_MS}-9999999999-{'n' * MAX_NODE_LENGTH}")  # the largest, 91 characters
@example(f"0{MAX_CLOCK_WALL_MS}-0000000000-{'n' * MAX_NODE_LENGTH}")  # one character more
@example(f"{MAX_CLOCK_WALL_MS + 1}-0-n")
@example(f"1-{MAX_CLOCK_COUNTER + 1}-n")
@example(f"1-00{MAX_CLOCK_COUNTER}-n")
@example(f"1-2-{'n' * (MAX_NODE_LENGTH + 1)}")
@RULES
def test_a_stamp_taken_at_a_glance_is_answered_as_the_full_checks_answer_it(value: str) -> None:
    glanced = read_clock(value)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(messages, "_PLAIN_STAMP", re.compile(r"(?!)"))  # never matches
        checked = read_clock(value)
    if isinstance(checked, str):
        assert glanced == checked
    else:
        assert isinstance(glanced, OpResult) and glanced.body_text == checked.body_text


@given(values)
@settings(RULES, suppress_health_check=[HealthCheck.too_slow])
def test_a_stored_header_the_document_allows_is_one_the_server_takes(value: str) -> None:
    if _verdicts(contract.HEADERS[IF_MATCH])(value) and value:
        assert _accepts(lambda v: token(v, IF_MATCH, 255), value), value
    entry = {"idempotency_key": "k", "method": "PUT", "path": "/notes/1", "if_match": value}
    if _verdicts(contract.BATCH_OPERATION)(entry) and value:
        assert _accepts(lambda v: token(v, IF_MATCH, 255), value), value


def test_a_batch_entry_is_an_object_of_the_published_fields() -> None:
    valid = _verdicts(contract.BATCH_OPERATION)
    entry = {"idempotency_key": "k", "method": "PUT", "path": "/notes/1"}
    assert valid(entry)
    for wrong in ({"if_match": {}}, {"id": 7}, {"clock": "x"}, {"extra": 1}, {"path": "x"}):
        assert not valid(entry | wrong), wrong
    assert contract.entry_refusal(entry | {"if_match": {}}, 3) is not None


# Batch entries near the schema's edges: the published fields (and one more), each often
# what a client sends and otherwise any value of the rules above or of another JSON type.
_ANY = st.none() | st.booleans() | st.integers(-1, 1) | st.just([]) | st.just({}) | values
_SENT = {
    "idempotency_key": st.sampled_from(["k", '"k"']),
    "method": st.sampled_from(["POST", "put", ""]),
    "path": st.sampled_from(["/notes", "/notes/1", "notes", "/notes/%2e%2e"]),
    "id": st.sampled_from(["", "op-1"]),
    "type": st.sampled_from(["create", ""]),
    "entity": st.sampled_from(["note:1", ""]),
    "body": st.just({"title": "t"}),
    "clock": st.sampled_from(["", "1-0-n", "1-2"]),
    "if_match": st.sampled_from(['"1"', "1", ""]),
    "extra": st.just(1),
}
entries = st.fixed_dictionaries(
    {}, optional={name: sent | sent | _ANY for name, sent in _SENT.items()}
)


@given(entries)
@example({"idempotency_key": "k", "method": "POST", "path": "/notes", "type": 0})
@example({"idempotency_key": "k", "method": "POST", "path": "/notes", "id": False})
@example({"idempotency_key": "k", "method": "POST", "path": "/notes", "entity": []})
@example({"idempotency_key": "k", "method": "", "path": "/notes"})
@example({"idempotency_key": "k", "method": "POST", "path": "/notes", "extra": None})
@settings(RULES, suppress_health_check=[HealthCheck.too_slow])
def test_an_entry_read_at_a_glance_is_answered_as_the_schema_answers_it(
    entry: dict[str, Any],
) -> None:
    # parse_batch_entry leaves the schema out for an entry of only its fields, each
    # optional one text or null: that must never let in what the schema refuses.
    glanced = batch_wire.parse_batch_entry(entry, 0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch_wire, "_ENTRY_FIELDS", frozenset())  # the schema for every entry
        checked = batch_wire.parse_batch_entry(entry, 0)
    if isinstance(checked, OpResult):
        assert isinstance(glanced, OpResult) and glanced.body_text == checked.body_text
    else:
        assert glanced == checked
        assert _verdicts(contract.BATCH_OPERATION)(entry), entry


@pytest.mark.parametrize("field", ["id", "type", "entity", "clock", "if_match"])
def test_a_null_optional_field_is_published_and_taken_as_not_given(field: str) -> None:
    # Each is typed string-or-null; a "not" of a bare pattern refused every null (a
    # pattern passes what is not a string, so its "not" fails it).
    entry = {"idempotency_key": "k", "method": "POST", "path": "/notes", field: None}
    assert _verdicts(contract.BATCH_OPERATION)(entry)
    assert contract.entry_refusal(entry, 0) is None
    parsed = batch_wire.parse_batch_entry(entry, 0)
    assert not isinstance(parsed, OpResult), parsed
    assert parsed == batch_wire.parse_batch_entry({k: v for k, v in entry.items() if k != field}, 0)


def test_no_schema_of_the_contract_negates_a_bare_pattern() -> None:
    # The class of the null refusal above: under "not", a pattern goes with its type.
    def walk(schema: object) -> None:
        if isinstance(schema, dict):
            negated = schema.get("not")
            assert not (isinstance(negated, dict) and negated.keys() == {"pattern"}), schema
            for value in schema.values():
                walk(value)
        elif isinstance(schema, list):
            for value in schema:
                walk(value)

    walk(contract.components())
    walk(contract.HEADERS)


def test_every_route_is_published_with_the_rules_it_enforces(notes_db: Database) -> None:
    app = create_notes_app(
        notes_db, purge_interval=None, lww_collections=["l"], crdt_collections=["d"]
    )
    with TestClient(app) as client:
        spec = client.get("/pigeon/v1/openapi.json").json()
    intake = app.state.intake
    for route in intake.routes:
        operation = spec["paths"][route.template][route.method.lower()]
        published = operation["requestBody"]["content"]["application/json"]["schema"]
        declared = route.check.schema if route.check is not None else None
        assert (published != {}) == (declared is not None), route.template
        assert {"$ref": "#/components/parameters/IdempotencyKey"} in operation["parameters"]
        assert {"400", "401", "404", "409", "413", "422"} <= set(operation["responses"])
    for entry in app.routes:
        read = entry.route if isinstance(entry, Guarded) else entry
        if not isinstance(read, Route) or not read.include_in_schema or read.path == OPENAPI_PATH:
            continue
        path = read.path.replace(":path", "")
        for method in (read.methods or set()) - {"HEAD"}:
            operation = spec["paths"][path][method.lower()]
            params = [p for p in operation.get("parameters", []) if p.get("in") == "path"]
            assert all(p["schema"] == {"$ref": "#/components/schemas/ResourceId"} for p in params)
            assert "security" in operation, (method, path)

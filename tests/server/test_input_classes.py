"""Hostile input, closed by class (issue 14, "What was seen" 2-4, 8, 9): every body goes
through the strict decoder, identifiers have a length and an alphabet, query parameters
are bounded, header values pigeon writes are encoded. Each refusal is a 400 problem that
stores nothing; on SQLite and PostgreSQL alike."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from pigeon.core.wire import BATCH_PATH, PROBLEM_JSON, PROBLEM_PREFIX
from pigeon.reference import schema as reference
from pigeon.reference.notes_reads import read_ledger
from pigeon.server import access
from pigeon.server.app import create_app
from pigeon.server.identifiers import resource_id
from pigeon.server.intake import Intake, IntakeContext
from pigeon.server.middleware import IdempotencyMiddleware
from pigeon.storage.base import Database

from .conftest import OPERATOR, NotesClient, TestClient, operator_token

_keys = iter(range(10**9))


def send(client: TestClient, method: str, path: str, content: Any = None, **headers: str) -> Any:
    """``content``: bytes or text sent as it is (hostile JSON), or a value to encode."""
    if content is not None and not isinstance(content, bytes | str):
        content = json.dumps(content)
    headers = {"Idempotency-Key": f"k{next(_keys)}", "Content-Type": "application/json"} | headers
    return client.request(method, path, content=content, headers=headers)


def claims(notes_db: Database) -> int:
    with notes_db.transaction() as tx:
        row = tx.fetchone("claim_stats")
    assert row is not None
    return int(row["claims"])


def assert_refused(reply: Any, slug: str, *words: str) -> None:
    assert reply.status_code == 400, reply.text
    assert reply.headers["content-type"] == PROBLEM_JSON
    problem = reply.json()
    assert problem["type"] == PROBLEM_PREFIX + slug, problem
    for word in words:
        assert word in problem["detail"], (word, problem["detail"])


@pytest.fixture
def client(notes_client: NotesClient) -> TestClient:
    return notes_client(
        lww_collections=["lww"], crdt_collections=["docs"], operator=operator_token()
    )


HOSTILE_JSON = [
    ('{"id": "n", "v": NaN}', "constant", "NaN"),
    ('{"id": "n", "v": Infinity}', "constant", "Infinity"),
    ('{"id": "n", "v": -Infinity}', "constant", "Infinity"),
    ('{"id": "n", "v": 1e400}', "number-range", "1e400"),
    ('{"id": "n", "v": -1e400}', "number-range", "1e400"),
    ('{"id": "n", "v": 1, "v": 2}', "duplicate-key", "'v'"),
    ('{"id": "n", "v": "\\ud800"}', "lone-surrogate", "surrogate"),
    ('{"id": "n", "v": "a\\udc00"}', "lone-surrogate", "surrogate"),
    ('{"id": "n", "v": "\\u0000"}', "nul", "NUL"),
    ('{"id": "n\\u0000"}', "nul", "NUL"),
    ('{"id": "n", "\\u0000": 1}', "nul", "NUL"),
    ('{"id": "n", "v": ' + "[" * 201 + "]" * 201 + "}", "too-deep", "200"),
    (b'{"id": "\xff"}', "encoding", "UTF-8"),
]


@pytest.mark.parametrize(("body", "problem", "word"), HOSTILE_JSON)
def test_hostile_json_is_refused_400_naming_it_alone_and_in_a_batch(
    client: TestClient, notes_db: Database, body: str | bytes, problem: str, word: str
) -> None:
    """Before: NaN and 1e400 taken and echoed as bare NaN/Infinity; the last of two keys
    kept; a lone surrogate a 500 (a plain-text 500 for a whole batch on SQLite); a NUL a
    500 with PostgreSQL's error text."""
    reply = send(client, "POST", "/notes", body)
    assert_refused(reply, "bad-json", word)
    assert reply.json()["json_error"] == problem
    raw = body if isinstance(body, bytes) else body.encode()
    batch = b'{"operations": [{"idempotency_key": "b", "method": "POST", "path": "/notes",'
    batch += b' "body": ' + raw + b"}]}"
    reply = client.post(BATCH_PATH, content=batch, headers={"Content-Type": "application/json"})
    assert_refused(reply, "bad-json", word)
    assert reply.json()["json_error"] == problem
    assert read_ledger(notes_db) == [] and claims(notes_db) == 0


def test_what_the_decoder_takes_it_takes_whole(client: TestClient, notes_db: Database) -> None:
    body = '{"id": "ok", "v": [1.5e300, -0.0, 12345678901234567890, "\\ud83d\\ude00", "\\\\u0000"]}'
    reply = send(client, "POST", "/notes", body)
    assert reply.status_code == 201, reply.text
    assert reply.json()["data"]["v"] == [1.5e300, -0.0, 12345678901234567890, "😀", "\\u0000"]


@pytest.mark.parametrize("note", ["€uro", "😀", "東京", "a b", "a?b#c%d", "ünïcödé" * 30])
def test_a_non_ascii_id_commits_and_answers_with_an_encoded_location_every_time(
    client: TestClient, notes_db: Database, note: str
) -> None:
    """Before: the note and its ledger row committed, then 500 on the first try and on
    every replay (the stored Location was not Latin-1): the client dead-lettered a write
    that had happened."""
    key = {"Idempotency-Key": f"euro-{next(_keys)}"}
    first = send(client, "POST", "/notes", {"id": note, "t": 1}, **key)
    assert first.status_code == 201, first.text
    location = "/notes/" + quote(note, safe="")
    assert first.headers["location"] == location
    again = send(client, "POST", "/notes", {"id": note, "t": 1}, **key)
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.headers["location"] == location
    put = send(client, "PUT", location, {"t": 2})
    assert put.status_code == 200, put.text
    assert put.json()["id"] == note and put.headers["location"] == location
    assert client.get(location).json()["data"] == {"t": 2}
    [result] = client.post(
        BATCH_PATH,
        json={
            "operations": [
                {"idempotency_key": "pb", "method": "PATCH", "path": location, "body": {"p": 1}}
            ]
        },
    ).json()["results"]
    assert result["status"] == 200 and result["headers"]["location"] == location
    assert len(read_ledger(notes_db)) == 3


IDS_REFUSED: list[tuple[Any, str]] = [
    ({"a": 1}, "not dict"),
    (True, "not bool"),
    (1.5, "not float"),
    ([1], "not list"),
    ("a/b", "path segment"),
    ("..", "path segment"),
    (".", "path segment"),
    ("a\nb", "control"),
    ("a\u2028b", "separator"),
    ("a\u200db", "format"),
    ("i" * 256, "256 characters"),
]


@pytest.mark.parametrize(("bad", "word"), IDS_REFUSED)
def test_an_id_outside_the_alphabet_is_refused_never_stringified(
    client: TestClient, notes_db: Database, bad: Any, word: str
) -> None:
    """Before: {"a": 1} became the note "{'a': 1}", true the note "True", and "a/b" a
    note no path could address again."""
    update = "AQHVptONiNioAQAEAQF0AmQxAA=="
    for path, body in (
        ("/notes", {"id": bad}),
        ("/lww", {"id": bad, "t": 1}),
        ("/docs", {"id": bad, "update": update}),
    ):
        reply = send(client, "POST", path, body)
        assert reply.status_code == 400, (path, reply.text)
        assert word.split()[-1] in reply.json()["detail"], reply.json()["detail"]
    if isinstance(bad, str) and bad not in (".", ".."):
        segment = quote(bad, safe="")
        for method, path in (("PUT", "/notes/"), ("PUT", "/lww/"), ("PATCH", "/docs/")):
            reply = send(client, method, path + segment, {"update": update})
            assert reply.status_code in (400, 404), (path, reply.text)
    assert read_ledger(notes_db) == []
    # An integer names the note it spells, as the path does.
    assert send(client, "POST", "/notes", {"id": 42}).json()["id"] == "42"
    assert send(client, "PUT", "/notes/42", {"id": 42, "t": 1}).status_code == 200
    assert send(client, "PUT", "/notes/42", {"id": True}).status_code == 400


def test_a_control_character_in_the_path_is_refused_before_the_claim(
    client: TestClient, notes_db: Database
) -> None:
    for path in ("/notes/a%00b", "/notes/a%0Ab", "/lww/a%0D%0Ab"):
        assert_refused(send(client, "PUT", path, {"t": 1}), "bad-path", "control")
    [result] = client.post(
        BATCH_PATH,
        json={"operations": [{"idempotency_key": "p", "method": "PUT", "path": "/notes/a%00b"}]},
    ).json()["results"]
    assert result["status"] == 400 and "control" in result["body"]["detail"]
    assert claims(notes_db) == 0


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("X-Pigeon-Operation-Id", "o" * 256),
        ("X-Pigeon-Operation-Id", "o" * 12_000),
        ("If-Match", '"' + "1" * 300 + '"'),
        ("X-Pigeon-Clock", "000000000000005-0000000000-" + "n" * 5000),
        ("X-Pigeon-Clock", "000000000000005-0000000000-" + "n" * 65),
        ("X-Pigeon-Clock", "-1-0-node"),
    ],
)
def test_every_stored_header_has_a_limit(
    client: TestClient, notes_db: Database, header: str, value: str
) -> None:
    """Before: 12 KB of operation id and 5,000 characters of clock node were stored."""
    reply = send(client, "POST", "/notes", {"id": "h"}, **{header: value})
    assert reply.status_code == 400, reply.text
    assert claims(notes_db) == 0
    ok = "o" * 255 if header == "X-Pigeon-Operation-Id" else None
    if ok is not None:
        assert send(client, "POST", "/notes", {"id": "h"}, **{header: ok}).status_code == 201


@pytest.mark.parametrize(
    "stamp",
    [
        "9" * 60 + "-0000000000-n",  # a 60-digit wall: it outranked every real stamp
        "253402300800000-0000000000-n",  # the first millisecond of year 10000
        "000000000000005-99999999999-n",  # a counter past its 10 digits
        "+00000000000005-0000000000-n",
        "00000000000_005-0000000000-n",
        "\u0665-0-n",  # an Arabic-Indic digit, which int() reads as 5
        " 5-0-n",
    ],
)
def test_a_clock_stamp_is_bounded_and_refused_naming_its_header(
    client: TestClient, notes_db: Database, stamp: str
) -> None:
    headers = {"Idempotency-Key": "c", "X-Pigeon-Clock": stamp.encode()}  # as UTF-8 bytes
    reply = client.post("/notes", json={"id": "c"}, headers=headers)
    assert_refused(reply, "bad-clock", "X-Pigeon-Clock")
    [result] = client.post(
        BATCH_PATH,
        json={
            "operations": [
                {
                    "idempotency_key": "c",
                    "method": "POST",
                    "path": "/notes",
                    "body": {"id": "c"},
                    "clock": stamp,
                }
            ]
        },
    ).json()["results"]
    assert result["status"] == 400 and result["body"]["type"] == PROBLEM_PREFIX + "bad-clock"
    assert claims(notes_db) == 0
    latest = "253402300799999-9999999999-n"  # the bound itself: the end of year 9999
    assert (
        send(client, "POST", "/notes", {"id": "c"}, **{"X-Pigeon-Clock": latest}).status_code == 201
    )


@pytest.mark.parametrize(
    ("field", "value", "word"),
    [
        ("id", "x" * (1 << 20), "at most 255"),
        ("id", {"a": 1}, "must be a string"),
        ("id", True, "must be a string"),
        ("entity", "note:" + "x" * 600, "at most 512"),
        ("entity", ["note:1"], "must be a string"),
        ("if_match", 7, "must be a string"),
        ("if_match", "9" * 300, "at most 255"),
        ("method", "P" * 17, "at most 16"),
        ("path", "/notes/" + "p" * 3000, "2048"),
        ("clock", "000000000000005-0000000000-" + "n" * 5000, "at most"),
    ],
)
def test_a_batch_entry_s_identifiers_are_bounded_strings(
    client: TestClient, notes_db: Database, field: str, value: Any, word: str
) -> None:
    """Before: a batch entry's 1 MiB id was stored as its operation id."""
    entry = {"idempotency_key": "e", "method": "POST", "path": "/notes", "body": {"id": "e"}}
    fine = {"idempotency_key": "f", "method": "POST", "path": "/notes", "body": {"id": "f"}}
    reply = client.post(BATCH_PATH, json={"operations": [entry | {field: value}, fine]})
    assert reply.status_code == 200, reply.text
    refused, accepted = reply.json()["results"]
    assert refused["status"] == 400 and word in refused["body"]["detail"], refused
    assert accepted["status"] == 201
    assert [e["idempotency_key"] for e in read_ledger(notes_db)] == ["f"]


@pytest.mark.parametrize(
    "query",
    [
        "limit=-1",
        "limit=0",
        "limit=99999999999999999999",
        "after=-1",
        "after=99999999999999999999",
        "after=1e3",
        "after=%D9%A1",  # an Arabic-Indic digit, which int() takes
        "after=1_0",
    ],
)
def test_query_parameters_out_of_range_are_400_never_500(client: TestClient, query: str) -> None:
    """Before: ?limit=-1 and ?limit=99999999999999999999 on the ledger answered 500."""
    name = query.partition("=")[0]
    for path, who in (("/pigeon/v1/ledger", OPERATOR), ("/pigeon/v1/outcomes", {})):
        if name == "limit" and path.endswith("outcomes"):
            continue
        reply = client.get(f"{path}?{query}", headers=who)
        assert_refused(reply, "bad-query", repr(name))
    ledger = "/pigeon/v1/ledger"
    assert client.get(f"{ledger}?limit=10000000&after=0", headers=OPERATOR).status_code == 200
    most = f"{ledger}?limit={2**63 - 1}&after={2**63 - 1}"
    assert client.get(most, headers=OPERATOR).status_code == 200


def test_a_16_mib_batch_of_empty_objects_is_refused_without_decoding_it_whole(
    client: TestClient, notes_db: Database
) -> None:
    """Before: decoded whole on the event loop before the 1,000-operation cap was checked
    (21.7 s, 800 MB). Now the entries are decoded one by one and the 1,001st refuses it."""
    entries = (16 << 20) // 3 - 10
    body = b'{"operations": [' + b",".join([b"{}"] * entries) + b"]}"
    started = time.perf_counter()
    reply = client.post(BATCH_PATH, content=body, headers={"Content-Type": "application/json"})
    elapsed = time.perf_counter() - started
    assert_refused(reply, "batch-too-large", "at most 1000")
    assert elapsed < 5, elapsed  # the upload itself in process; decoding 1,001 entries
    assert claims(notes_db) == 0


def test_an_identifier_a_handler_checks_itself_is_a_400_and_frees_the_key(
    client: TestClient, notes_db: Database
) -> None:
    """The class behind a 500 the fuzz test found: PATCH /notes/0 with {"id": ""} reached
    resource_id("") in the handler, and an InvalidIdentifier raised there was an internal
    error. Every identifier a handler checks itself is the client's mistake: 400, nothing
    stored, and the corrected request runs under the same key."""
    assert send(client, "PATCH", "/notes/0", {"": None, "id": ""}).status_code == 404  # no note 0
    intake = Intake(notes_db)

    def named(ctx: IntakeContext) -> Any:
        return 200, {"id": resource_id(ctx.body.get("name"), "name")}

    intake.add_operation("POST", "/named", named)
    with TestClient(create_app(intake, purge_interval=None), raise_server_exceptions=False) as c:
        before = claims(notes_db)
        assert_refused(
            send(c, "POST", "/named", {"name": "a/b"}, **{"Idempotency-Key": "n"}),
            "bad-identifier",
            "name",
        )
        assert claims(notes_db) == before  # the key was given back
        reply = send(c, "POST", "/named", {"name": "ab"}, **{"Idempotency-Key": "n"})
        assert reply.status_code == 200 and reply.json() == {"id": "ab"}


def test_a_header_a_handler_returns_is_encoded_before_it_is_stored(notes_db: Database) -> None:
    """The class behind the Location bug: whatever a handler puts in a header, the write
    either commits and answers, now and on every replay, or does not commit at all."""
    reference.attach(notes_db)  # the handler writes the reference app's ledger
    intake = Intake(notes_db)

    def odd(ctx: IntakeContext) -> Any:
        return 200, {"ok": True}, {"X-Where": "ça\r\nSet-Cookie: x=1", "Location": "/€"}

    def bad_name(ctx: IntakeContext) -> Any:
        reference.execute(
            ctx.tx,
            "ledger_append",
            {
                "idempotency_key": ctx.idempotency_key,
                "principal": ctx.principal,
                "operation_id": ctx.operation_id,
                "entity": "x:1",
                "method": ctx.method,
                "status": 200,
                "version": 1,
                "clock": ctx.clock,
                "now": ctx.now,
            },
        )
        return 200, {}, {"Bad Name": "v"}

    intake.add_operation("POST", "/odd", odd)
    intake.add_operation("POST", "/bad-name", bad_name)
    with TestClient(create_app(intake, purge_interval=None), raise_server_exceptions=False) as c:
        for _ in range(2):
            reply = send(c, "POST", "/odd", {}, **{"Idempotency-Key": "odd"})
            assert reply.status_code == 200
            assert reply.headers["x-where"] == "%C3%A7a%0D%0ASet-Cookie: x=1"
            assert reply.headers["location"] == "/%E2%82%AC" and "set-cookie" not in reply.headers
        assert send(c, "POST", "/bad-name", {}).status_code == 500
    assert read_ledger(notes_db) == []  # the handler's write did not commit


def test_the_middleware_decodes_json_bodies_strictly_before_the_claim(notes_db: Database) -> None:
    seen: list[bytes] = []

    async def echo(request: Request) -> PlainTextResponse:
        seen.append(await request.body())
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/{any:path}", echo, methods=["POST"])])
    wrapped = IdempotencyMiddleware(app, notes_db)
    with TestClient(wrapped) as c:
        reply = send(c, "POST", "/x", '{"a": 1, "a": 2}')
        assert_refused(reply, "bad-json", "twice")
        text = {"Content-Type": "text/plain"}
        assert send(c, "POST", "/x", '{"a": 1, "a": 2}', **text).status_code == 200
        assert_refused(send(c, "POST", "/x%00y", "{}"), "bad-path", "control")
        assert send(c, "POST", "/x", '{"a": 1.5}').status_code == 200
    assert seen == [b'{"a": 1, "a": 2}', b'{"a": 1.5}']
    assert claims(notes_db) == 2


def test_a_route_added_beside_the_intake_is_untouched(notes_db: Database) -> None:
    # Reads carry no body: nothing of the above gets in their way.
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hi")

    routes = [access.public(Route("/hello", hello))]
    app = create_app(Intake(notes_db), routes=routes, purge_interval=None)
    assert TestClient(app).get("/hello").text == "hi"

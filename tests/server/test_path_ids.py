"""Every path parameter of every route passes one identifier check before any handler or
store sees it (issue 21, item 2): the routes are enumerated from the app itself (the
intake's, the reference app's reads, an app's own routes and a mounted one), and each
parameter is sent every hostile value with every method its route has. 400 ``bad-path``
every time, on SQLite and PostgreSQL: never a 5xx (PostgreSQL refused a NUL with a 500),
never a 404 (SQLite looked the NUL id up and found nothing)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from pigeon.core.wire import BATCH_PATH, PROBLEM_JSON, PROBLEM_PREFIX
from pigeon.reference.notes import create_notes_app
from pigeon.server import access
from pigeon.server.access import OperatorToken, Rule
from pigeon.server.app import create_app
from pigeon.server.identifiers import MAX_ID_LENGTH, path_problem
from pigeon.server.intake import Intake, IntakeContext
from pigeon.storage.server import open_server_db

from .conftest import OPERATOR, OPERATOR_TOKEN, TestClient

# Each as it is written into a URL (percent-encoded), with what makes it hostile.
HOSTILE = {
    "%00": "NUL",
    "a%00b": "NUL inside",
    "%01": "a C0 control",
    "%0A": "LF",
    "a%0D%0Ab": "CR LF",
    "%09": "TAB",
    "%7F": "DEL",
    "%C2%85": "NEL, a C1 control",
    "%E2%80%AE": "U+202E, a bidi override",
    "a%E2%80%8Fb": "U+200F, a bidi mark",
    "%E2%80%8B": "a zero-width space",
    "%ED%A0%80": "a UTF-16 surrogate, UTF-8 encoded",
    "%FF": "invalid UTF-8",
    "a%C3": "a truncated UTF-8 sequence",
    "%2E%2E": "a dot segment",
    "x" * (MAX_ID_LENGTH + 1): "over-long",
    "%E2%82%AC" * (MAX_ID_LENGTH + 1): "over-long in characters",
}
USER = {"Authorization": "Bearer ada.1"}
_PARAM = re.compile(r"{([^}:]+)(?::[^}]+)?}")


def credentials(rule: Rule | None) -> dict[str, str]:
    """What lets this rule's caller in: the operator for operator routes, else a user."""
    return OPERATOR if rule is Rule.OPERATOR else USER


def parameterised(app: Starlette) -> Iterator[tuple[str, str, Rule | None]]:
    """(method, path template, rule) for every method of every route with a parameter."""
    for found in access.route_rules(app.routes):
        if _PARAM.search(found.path):
            for method in sorted(found.methods):
                yield method, found.path, found.rule


def _own_routes() -> list[Any]:
    """An app's own routes beside the intake's: a plain one, two parameters, a mount."""

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse(dict(request.path_params))

    inner = [Route("/{item}", echo, methods=["GET", "DELETE"])]
    return [
        access.user(Route("/shelves/{shelf}/books/{book}", echo, methods=["GET", "POST"])),
        access.owner(Mount("/mounted/{area}", routes=inner)),
    ]


@pytest.fixture
def apps(server_db_url: str) -> Iterator[list[Starlette]]:
    """The reference notes app, and an app built with create_app and its own routes."""
    notes_db = open_server_db(server_db_url)
    intake = Intake(notes_db)

    def touch(ctx: IntakeContext) -> tuple[int, dict[str, str]]:
        return 200, {"id": ctx.params["thing"]}

    intake.add_operation("PUT", "/things/{thing}", touch)
    operator = OperatorToken(OPERATOR_TOKEN)
    notes = create_notes_app(
        notes_db, lww_collections=("lww-notes",), crdt_collections=("docs",), operator=operator
    )
    own = create_app(intake, routes=_own_routes(), operator=operator, purge_interval=None)
    try:
        yield [notes, own]
    finally:
        notes_db.close()


def test_every_path_parameter_of_every_route_refuses_hostile_ids(apps: list[Starlette]) -> None:
    sent = 0
    for app in apps:
        routes = list(parameterised(app))
        assert routes, "the app has routes with parameters"
        with TestClient(app) as client:
            for method, template, rule in routes:
                for value, why in HOSTILE.items():
                    path = _PARAM.sub(value, template)
                    headers = credentials(rule) | {"Idempotency-Key": f"k-{sent}"}
                    reply = client.request(method, path, headers=headers, json={"x": 1})
                    sent += 1
                    assert reply.status_code == 400, (method, template, why, reply.text)
                    if method != "HEAD":
                        assert reply.headers["content-type"] == PROBLEM_JSON
                        assert reply.json()["type"] == PROBLEM_PREFIX + "bad-path"
    assert sent > 300


def test_the_check_comes_before_the_access_decision(apps: list[Starlette]) -> None:
    # Any path, served or not, with or without credentials: the same 400, so the answer
    # tells nobody which routes exist (an operator route is a 404 to a user otherwise).
    with TestClient(apps[0]) as client:
        for path in ("/pigeon/v1/records/%00", "/no/such/route/%00", "/notes/%FF"):
            assert client.get(path).status_code == 400
            assert client.get(path, headers=USER).status_code == 400


def test_a_batch_entry_s_path_meets_the_same_rule(apps: list[Starlette]) -> None:
    entries = [
        {"idempotency_key": f"b{n}", "method": "PUT", "path": f"/notes/{value}", "body": {}}
        for n, value in enumerate(HOSTILE)
        if len(value) <= MAX_ID_LENGTH + 1  # the longest: over a batch entry's path limit
    ]
    with TestClient(apps[0]) as client:
        reply = client.post(BATCH_PATH, json={"operations": entries}, headers=USER)
    assert reply.status_code == 200, reply.text
    results = reply.json()["results"]
    assert len(results) == len(entries)
    for result, why in zip(results, HOSTILE.values(), strict=False):
        assert result["status"] == 400, (why, result)
        assert result["body"]["type"] == PROBLEM_PREFIX + "bad-path", (why, result)


def test_ids_of_any_script_still_pass() -> None:
    for path in ("/notes/€uro", "/notes/東京", "/notes/a b", "/notes/" + "é" * MAX_ID_LENGTH):
        assert path_problem(path) is None, path
    assert path_problem("/notes/%EF%BF%BD", b"/notes/%EF%BF%BD") is None  # U+FFFD, encoded
    assert path_problem("/notes/\ufffd", b"/notes/%FF") is not None  # the same, decoded from junk


def test_the_check_is_linear_in_the_longest_path_a_request_head_can_carry() -> None:
    """It runs on the event loop for every request: bounded by the 16 KiB head (h11)."""
    for raw in (
        "/" + "%FF" * 5400,
        "/a" + "/%FF" * 5400,
        "/" + "a/" * 8000,
        "/" + "%E2%80%AE" * 1800,
    ):
        started = time.perf_counter()
        path_problem(unquote(raw), raw.encode())
        assert time.perf_counter() - started < 0.1, raw[:20]

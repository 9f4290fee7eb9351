"""The trust boundary (DESIGN.md): every route of the reference server behind the right
principal, decided in one place (`pigeon.server.access`), on SQLite and PostgreSQL.

The matrix sends every route of the app a request aimed at alice's things, as nobody, as
the operator, as bob (the wrong principal) and as alice. Bob's answer must be the very
answer he gets for a thing that does not exist (he never learns alice's exists), and no
answer but alice's and the operator's may hold any of alice's data.
"""

from __future__ import annotations

import base64
import hmac
import logging
import uuid
from typing import Any

import httpx
import pytest
from pycrdt import Doc, Text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Mount, Route

from pigeon.core.wire import PROBLEM_JSON
from pigeon.exceptions import ConfigurationError
from pigeon.reference.notes import create_notes_app
from pigeon.reference.notes_reads import read_ledger
from pigeon.server import access
from pigeon.server.access import AccessPolicy, OperatorToken, Rule, route_rules
from pigeon.server.app import create_app
from pigeon.server.auth import BearerAuth
from pigeon.server.auth_options import AuthOptions
from pigeon.server.intake import Intake
from pigeon.server.middleware import IdempotencyMiddleware
from pigeon.server.options import ServerOptions
from pigeon.storage.base import Database

from .conftest import OPERATOR, OPERATOR_TOKEN, TestClient, operator_token

ALICE = {"Authorization": "Bearer alice.1"}
BOB = {"Authorization": "Bearer bob.1"}
NOBODY: dict[str, str] = {}
SECRET = "alice-secret-7f3a"  # in every thing alice owns: nobody else may ever see it
CALLERS = {"none": NOBODY, "operator": OPERATOR, "bob": BOB, "alice": ALICE}

# Every route of the reference server (`pigeon serve`: notes, an LWW and a CRDT
# collection, answers, records, the dashboard) and what each caller gets when it aims at
# alice's thing: (none, operator, bob, alice). A route added to the app and not here fails
# test_the_matrix_covers_every_route_of_the_app.
MATRIX: dict[tuple[str, str], tuple[Rule, tuple[int, int, int, int]]] = {
    ("GET", "/pigeon/v1/health"): (Rule.PUBLIC, (200, 200, 200, 200)),
    ("GET", "/pigeon/v1/openapi.json"): (Rule.PUBLIC, (200, 200, 200, 200)),
    ("POST", "/pigeon/v1/batch"): (Rule.USER, (401, 403, 200, 200)),
    ("POST", "/notes"): (Rule.USER, (401, 403, 201, 409)),  # bob: his own new note
    ("PUT", "/notes/{id}"): (Rule.USER, (401, 403, 404, 200)),
    ("PATCH", "/notes/{id}"): (Rule.USER, (401, 403, 404, 200)),
    ("DELETE", "/notes/{id}"): (Rule.USER, (401, 403, 404, 200)),
    ("GET", "/notes"): (Rule.USER, (401, 403, 200, 200)),
    ("GET", "/notes/{id}"): (Rule.USER, (401, 403, 404, 200)),
    ("POST", "/lww-notes"): (Rule.USER, (401, 403, 201, 200)),
    ("PUT", "/lww-notes/{id}"): (Rule.USER, (401, 403, 201, 200)),  # LWW puts create
    ("DELETE", "/lww-notes/{id}"): (Rule.USER, (401, 403, 404, 200)),
    ("GET", "/lww-notes/{id}"): (Rule.USER, (401, 403, 404, 200)),
    ("POST", "/docs"): (Rule.USER, (401, 403, 201, 200)),
    ("PATCH", "/docs/{id}"): (Rule.USER, (401, 403, 201, 200)),
    ("GET", "/docs/{id}"): (Rule.USER, (401, 403, 404, 200)),
    ("GET", "/pigeon/v1/outcomes"): (Rule.USER, (401, 403, 200, 200)),
    ("POST", "/answers"): (Rule.USER, (401, 403, 202, 202)),
    ("GET", "/pigeon/v1/records/{record_id}"): (Rule.OWNER, (401, 200, 404, 200)),
    ("GET", "/answers/{record_id}"): (Rule.OWNER, (401, 200, 404, 200)),
    ("GET", "/pigeon/v1/ledger"): (Rule.OPERATOR, (401, 200, 404, 404)),
    ("GET", "/pigeon/v1/dashboard"): (Rule.OPERATOR, (401, 200, 404, 404)),
    ("GET", "/metrics"): (Rule.OPERATOR, (401, 200, 404, 404)),
    # the operations page (pigeon.ops.web): an empty form is refused (400), a sign-out
    # redirects to the sign-in form; signing in from no page of this origin is refused
    ("GET", "/pigeon/"): (Rule.OPERATOR, (401, 200, 404, 404)),
    ("POST", "/pigeon/actions/preview"): (Rule.OPERATOR, (401, 400, 404, 404)),
    ("POST", "/pigeon/actions/apply"): (Rule.OPERATOR, (401, 400, 404, 404)),
    ("POST", "/pigeon/logout"): (Rule.OPERATOR, (401, 200, 404, 404)),
    ("GET", "/pigeon/login"): (Rule.PUBLIC, (200, 200, 200, 200)),
    ("POST", "/pigeon/login"): (Rule.PUBLIC, (403, 403, 403, 403)),
}


def reference_app(notes_db: Database, **options: Any) -> Starlette:
    """The app `pigeon serve` runs, with an operator token and, unless told otherwise,
    no anonymous callers (its defaults)."""
    options = {"authenticate": BearerAuth(), "operator": operator_token()} | options
    return create_notes_app(
        notes_db,
        purge_interval=None,
        lww_collections=("lww-notes",),
        crdt_collections=("docs",),
        **options,
    )


def crdt_update(word: str) -> str:
    doc: Doc[Any] = Doc()
    doc.get("body", type=Text).insert(0, word)
    return base64.b64encode(bytes(doc.get_update())).decode("ascii")


def send(
    client: TestClient, method: str, path: str, who: dict[str, str], body: Any = None
) -> httpx.Response:
    headers = {"Idempotency-Key": str(uuid.uuid4()), **who}
    return client.request(method, path, json=body, headers=headers)


def _body(method: str, template: str, target: str, words: str) -> Any:
    if template == "/pigeon/v1/batch":
        op = {"idempotency_key": str(uuid.uuid4()), "method": "PUT", "path": f"/notes/{target}"}
        return {"operations": [op | {"body": {"title": words}}]}
    if template == "/answers":
        return {"question": "q", "answer": words}
    if template.startswith("/docs"):
        update = {"update": crdt_update(words)}
        return update | ({"id": target} if method == "POST" else {})
    if method in ("POST", "PUT", "PATCH"):
        return {"title": words} | ({"id": target} if method == "POST" else {})
    return None


def _words(caller: str) -> str:
    return SECRET if caller == "alice" else f"words of {caller}"


# Alice's things, one for each route that aims at one: bob's writes to alice's ids make
# things of his own (an LWW put, a CRDT patch, a create), which must not stand in for
# alice's in another route's row.
_THINGS = {
    "/notes": ("POST", "PUT", "PATCH", "DELETE", "GET"),
    "/lww-notes": ("POST", "PUT", "DELETE", "GET"),
    "/docs": ("POST", "PATCH", "GET"),
}


def _target(method: str, template: str, things: dict[str, str]) -> str:
    if template.startswith("/pigeon/v1/records") or template == "/answers/{record_id}":
        return things["record"]
    if template == "/pigeon/v1/batch":
        return things["/notes PUT"]  # a PUT of alice's note, inside a batch
    return things.get(f"/{template.split('/')[1]} {method}", "")


def _alices_things(client: TestClient) -> dict[str, str]:
    things = {}
    for collection, methods in _THINGS.items():
        for method in methods:
            thing = f"a{collection.replace('/', '-')}-{method.lower()}"
            things[f"{collection} {method}"] = thing
            body = _body("POST", collection, thing, SECRET)
            created = send(client, "POST", collection, ALICE, body)
            assert created.status_code == 201, created.text
    things["/pigeon/v1/batch"] = things["/notes PUT"]
    answer = send(client, "POST", "/answers", ALICE, {"question": "q", "answer": SECRET})
    assert answer.status_code == 202, answer.text
    return things | {"record": answer.json()["record"]}


def _path(template: str, target: str) -> str:
    return template.replace("{record_id}", target).replace("{id}", target)


def _served(app: Starlette) -> set[tuple[str, str]]:
    return {(method, rr.path) for rr in route_rules(app.routes) for method in rr.methods - {"HEAD"}}


def test_the_matrix_covers_every_route_of_the_app(notes_db: Database) -> None:
    """Enumerates the app's routes (the intake's operations, the batch, the read routes):
    each declares a rule, the one the matrix expects, and the matrix has no stale row."""
    app = reference_app(notes_db)
    rules = {
        (method, rr.path): rr.rule
        for rr in route_rules(app.routes)
        for method in rr.methods - {"HEAD"}
    }
    assert None not in rules.values(), [k for k, v in rules.items() if v is None]
    assert set(rules) == set(MATRIX)
    assert rules == {key: rule for key, (rule, _) in MATRIX.items()}


def test_every_route_answers_each_caller_as_its_rule_says(notes_db: Database) -> None:
    app = reference_app(notes_db)
    wrong: list[str] = []
    with TestClient(app, raise_server_exceptions=False) as client:
        things = _alices_things(client)
        for (method, template), (_, expected) in MATRIX.items():
            target = _target(method, template, things)
            path = _path(template, target)
            for (name, who), status in zip(CALLERS.items(), expected, strict=True):
                body = _body(method, template, target, _words(name))
                reply = send(client, method, path, who, body)
                where = f"{method} {template} as {name}"
                if reply.status_code != status:
                    wrong.append(f"{where}: {reply.status_code}, expected {status}")
                if name in ("none", "bob") and SECRET in reply.text:
                    wrong.append(f"{where}: alice's data in the answer")
                if reply.status_code == 401:
                    _check_unauthorized(reply, where, wrong)
                if name == "bob":
                    _check_same_as_nothing(client, method, template, reply, wrong)
                if name == "bob" and template == "/pigeon/v1/batch":
                    result = reply.json()["results"][0]
                    if result["status"] != 404 or SECRET in str(result):
                        wrong.append(f"{where}: alice's note reached in a batch: {result}")
    assert not wrong, "\n".join(wrong)
    # Nothing was written but by alice and bob: no anonymous and no operator writes.
    assert {row["principal"] for row in read_ledger(notes_db)} == {"alice", "bob"}


def _check_unauthorized(reply: httpx.Response, where: str, wrong: list[str]) -> None:
    if not reply.headers["content-type"].startswith(PROBLEM_JSON):
        wrong.append(f"{where}: a 401 that is not problem+json")
    elif reply.headers.get("www-authenticate") != "Bearer":
        wrong.append(f"{where}: a 401 without WWW-Authenticate: Bearer")


def _check_same_as_nothing(
    client: TestClient, method: str, template: str, reply: httpx.Response, wrong: list[str]
) -> None:
    """Bob's answer about alice's thing is his answer about a thing nobody has: the same
    status and, once the two ids are set aside, the same refusal."""
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    body = _body(method, template, ghost, _words("bob"))
    control = send(client, method, _path(template, ghost), BOB, body)
    if control.status_code != reply.status_code:
        wrong.append(
            f"{method} {template} as bob: {reply.status_code} for alice's, "
            f"{control.status_code} for nothing"
        )
    elif reply.status_code == 404:
        mine, nothing = reply.json(), control.json()
        mine.pop("detail", None), nothing.pop("detail", None)
        if mine != nothing:
            wrong.append(f"{method} {template} as bob: {mine} differs from {nothing}")


def test_a_user_on_an_operator_route_gets_the_routers_own_404(notes_db: Database) -> None:
    """Word for word what a route that does not exist answers, whatever the method (the
    decision comes before Starlette's 405) and with or without a trailing slash (no
    redirect that would confirm the route)."""
    with TestClient(reference_app(notes_db), follow_redirects=False) as client:
        absent = client.get("/pigeon/v1/nothing-here", headers=BOB)
        for method, path in (
            ("GET", "/pigeon/v1/dashboard"),
            ("POST", "/pigeon/v1/dashboard"),
            ("GET", "/metrics/"),
            ("DELETE", "/pigeon/v1/ledger"),
        ):
            reply = client.request(method, path, headers=BOB)
            assert reply.status_code == 404, (method, path)
            assert reply.headers["content-type"] == absent.headers["content-type"]
            body, control = reply.json(), absent.json()
            assert body["detail"] == f"no route {method} {path}"
            assert {k: v for k, v in body.items() if k != "detail"} == {
                k: v for k, v in control.items() if k != "detail"
            }
        assert client.post("/pigeon/v1/dashboard", headers=OPERATOR).status_code == 405


def test_a_record_is_its_creators_and_the_operators(notes_db: Database) -> None:
    with TestClient(reference_app(notes_db)) as client:
        created = send(client, "POST", "/answers", ALICE, {"question": "q", "answer": SECRET})
        location = created.headers["location"]
        mine = client.get(location, headers=ALICE)
        assert mine.status_code == 200 and mine.json()["data"]["answer"] == SECRET
        assert client.get(location, headers=OPERATOR).json() == mine.json()
        theirs = client.get(location, headers=BOB)
        nothing = client.get("/pigeon/v1/records/" + str(uuid.uuid4()), headers=BOB)
        assert theirs.status_code == nothing.status_code == 404
        assert theirs.json()["title"] == nothing.json()["title"]
        assert client.get(location).status_code == 401


def test_anonymous_callers_are_one_principal_only_when_allowed(notes_db: Database) -> None:
    with TestClient(reference_app(notes_db)) as strict:
        refused = send(strict, "POST", "/notes", NOBODY, {"id": "n"})
        assert refused.status_code == 401 and refused.json()["detail"]
    assert read_ledger(notes_db) == []
    anonymous = ServerOptions(auth=AuthOptions(allow_anonymous=True))
    with TestClient(reference_app(notes_db, options=anonymous)) as open_:
        assert send(open_, "POST", "/notes", NOBODY, {"id": "n"}).status_code == 201
        # Two anonymous callers are the same user: they share the note.
        assert open_.get("/notes/n").status_code == 200
        assert open_.get("/notes/n", headers=BOB).status_code == 404
        # Anonymous is a user, never an operator.
        assert open_.get("/pigeon/v1/ledger").status_code == 401
    assert [row["principal"] for row in read_ledger(notes_db)] == ["anonymous"]


def test_the_stand_in_without_an_authenticator_still_lets_anonymous_in(notes_db: Database) -> None:
    """The library's default (no authenticator: the BearerAuth stand-in, for tests and
    demos) keeps anonymous callers; any authenticator passed turns them away."""
    with TestClient(create_notes_app(notes_db, purge_interval=None)) as client:
        assert send(client, "POST", "/notes", NOBODY, {"id": "n"}).status_code == 201
        assert client.get("/pigeon/v1/ledger", headers=OPERATOR).status_code == 404  # no operator
    with TestClient(
        create_notes_app(notes_db, purge_interval=None, authenticate=BearerAuth())
    ) as c:
        assert send(c, "POST", "/notes", NOBODY, {"id": "m"}).status_code == 401


def test_a_route_without_a_declared_rule_is_refused_at_build_time(notes_db: Database) -> None:
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hi")

    intake = Intake(notes_db)
    with pytest.raises(ConfigurationError, match=r"route GET HEAD /hello declares no access rule"):
        create_app(intake, routes=[Route("/hello", hello)])
    with pytest.raises(ConfigurationError, match=r"/ops/hello declares no access rule"):
        create_app(intake, routes=[Mount("/ops", routes=[Route("/hello", hello)])])
    opaque = Mount("/raw", app=PlainTextResponse("raw"))
    with pytest.raises(ConfigurationError, match=r"/raw mounts an app with no routes"):
        create_app(intake, routes=[opaque])
    with pytest.raises(ConfigurationError, match="declares two access rules"):
        access.user(access.public(Route("/hello", hello)))


def test_mounted_routes_are_enumerated_and_guarded(notes_db: Database) -> None:
    async def who(request: Request) -> JSONResponse:
        return JSONResponse({"principal": access.caller(request).principal})

    routes = [
        access.operator(Mount("/ops", routes=[Route("/who", who)])),
        Mount("/mixed", routes=[access.user(Route("/who", who)), access.public(Route("/p", who))]),
    ]
    app = create_app(
        Intake(notes_db), routes=routes, authenticate=BearerAuth(), operator=operator_token()
    )
    rules = {rr.path: rr.rule for rr in route_rules(app.routes)}
    assert rules["/ops/who"] is Rule.OPERATOR
    assert (rules["/mixed/who"], rules["/mixed/p"]) == (Rule.USER, Rule.PUBLIC)
    with TestClient(app) as client:
        assert client.get("/ops/who").status_code == 401
        assert client.get("/ops/who", headers=BOB).status_code == 404
        assert client.get("/ops/who", headers=OPERATOR).json() == {"principal": None}
        assert client.get("/mixed/who", headers=BOB).json() == {"principal": "bob"}
        assert client.get("/mixed/who").status_code == 401
        assert client.get("/mixed/p").status_code == 200


def test_routes_bound_to_one_app_are_not_taken_by_another(notes_db: Database) -> None:
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hi")

    shared = [access.public(Route("/hello", hello))]
    create_app(Intake(notes_db), routes=shared)
    with pytest.raises(ConfigurationError, match="already served by another app"):
        create_app(Intake(notes_db), routes=shared)


def test_the_operator_token_is_compared_in_constant_time_and_never_shown(
    notes_db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    caplog.set_level(logging.DEBUG)
    wrong = {"Authorization": f"Bearer {OPERATOR_TOKEN[:-1]}x"}
    with TestClient(reference_app(notes_db), raise_server_exceptions=False) as client:
        assert client.get("/pigeon/v1/ledger", headers=OPERATOR).status_code == 200
        refused = client.get("/pigeon/v1/ledger", headers=wrong)
        assert refused.status_code == 404  # the stand-in reads it as a user's token
        assert OPERATOR_TOKEN[:-1] not in refused.text
    assert compared and all(isinstance(a, bytes) for a, _ in compared)
    assert OPERATOR_TOKEN not in caplog.text and OPERATOR_TOKEN[:-1] not in caplog.text
    assert OPERATOR_TOKEN not in repr(operator_token())
    assert OPERATOR_TOKEN not in repr(AccessPolicy(BearerAuth(), operator=operator_token()))
    with pytest.raises(ConfigurationError, match="at least 16 characters"):
        OperatorToken("short")


def test_the_middleware_turns_anonymous_away_with_a_real_authenticator(notes_db: Database) -> None:
    async def charge(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True}, status_code=201)

    inner = Starlette(routes=[Route("/charges", charge, methods=["POST"])])
    strict = IdempotencyMiddleware(inner, notes_db, authenticate=BearerAuth())
    with TestClient(strict) as client:
        refused = client.post("/charges", json={}, headers={"Idempotency-Key": "k"})
        assert refused.status_code == 401
        assert refused.headers["content-type"].startswith(PROBLEM_JSON)
        ok = client.post("/charges", json={}, headers={"Idempotency-Key": "k", **ALICE})
        assert ok.status_code == 201


def test_the_openapi_document_states_each_read_routes_refusals(notes_db: Database) -> None:
    with TestClient(reference_app(notes_db)) as client:
        paths = client.get("/pigeon/v1/openapi.json").json()["paths"]
    # 400: a query parameter out of its range (the strict input checks).
    assert set(paths["/pigeon/v1/ledger"]["get"]["responses"]) == {"200", "400", "401", "404"}
    assert set(paths["/notes/{id}"]["get"]["responses"]) == {"200", "400", "401", "403", "404"}
    records = paths["/pigeon/v1/records/{record_id}"]["get"]["responses"]
    assert set(records) == {"200", "400", "401", "404"}


def test_a_user_never_reaches_anothers_idempotency_key(notes_db: Database) -> None:
    """Bob sending alice's key, with her request or another: a first execution of his
    own, never her stored answer, never the 422 that would tell him the key is taken."""
    with TestClient(reference_app(notes_db)) as client:
        key = {"Idempotency-Key": "shared-key"}
        hers = client.post("/notes", json={"id": "k", "t": SECRET}, headers=key | ALICE)
        same = client.post("/notes", json={"id": "k", "t": SECRET}, headers=key | BOB)
        other = client.post("/notes", json={"id": "j"}, headers=key | BOB)
        batch = {
            "operations": [
                {
                    "idempotency_key": "shared-key",
                    "method": "POST",
                    "path": "/notes",
                    "body": {"id": "b"},
                }
            ]
        }
        in_batch = client.post("/pigeon/v1/batch", json=batch, headers=BOB).json()["results"][0]
    assert hers.status_code == same.status_code == 201
    assert "idempotent-replayed" not in same.headers
    assert other.status_code == 422  # his own key now: his own first request decides it
    assert in_batch["status"] == 422 and not in_batch["replayed"]
    assert [(r["principal"], r["idempotency_key"]) for r in read_ledger(notes_db)] == [
        ("alice", "shared-key"),
        ("bob", "shared-key"),
    ]

"""A 405's ``Allow`` lists exactly the methods served at the path (issue 21, item 6):
``OPTIONS /notes/x`` answered ``Allow: DELETE, PATCH, PUT``, the intake's route alone,
though ``GET`` and ``HEAD`` of the same path are the app's read route. Checked against
the app's own routes, every path of them, with OPTIONS and with a method none serves."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from pigeon.reference.notes import create_notes_app
from pigeon.server import access
from pigeon.server.access import OperatorToken, Rule
from pigeon.server.app import create_app
from pigeon.server.intake import Intake
from pigeon.storage.server import open_server_db

from .conftest import OPERATOR, OPERATOR_TOKEN, TestClient

USER = {"Authorization": "Bearer ada.1"}
_PARAM = re.compile(r"{[^}]+}")
ALL_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}


def paths_and_methods(app: Starlette) -> dict[str, tuple[set[str], Rule | None]]:
    """Each path the app serves (a parameter filled in), its methods, one of its rules."""
    served: dict[str, tuple[set[str], Rule | None]] = defaultdict(lambda: (set(), None))
    for found in access.route_rules(app.routes):
        path = _PARAM.sub("x", found.path)
        methods, rule = served[path]
        served[path] = (methods | set(found.methods), rule or found.rule)
    return dict(served)


@pytest.fixture
def apps(tmp_path: object) -> Iterator[list[Starlette]]:
    notes_db = open_server_db(f"{tmp_path}/server.db")

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({})

    operator = OperatorToken(OPERATOR_TOKEN)
    mounted = Mount("/shelf", routes=[Route("/{book}", echo, methods=["GET", "DELETE"])])
    own = create_app(
        Intake(notes_db),
        routes=[access.user(mounted), access.user(Route("/shelf/{book}", echo, methods=["PUT"]))],
        operator=operator,
        purge_interval=None,
    )
    notes = create_notes_app(notes_db, lww_collections=("lww-notes",), operator=operator)
    try:
        yield [notes, own]
    finally:
        notes_db.close()


def test_allow_lists_exactly_the_methods_served_at_each_path(apps: list[Starlette]) -> None:
    checked = 0
    for app in apps:
        with TestClient(app) as client:
            for path, (methods, rule) in paths_and_methods(app).items():
                headers = OPERATOR if rule is Rule.OPERATOR else USER
                for method in ("OPTIONS", *sorted(ALL_METHODS - methods)):
                    reply = client.request(method, path, headers=headers)
                    assert reply.status_code == 405, (method, path, reply.status_code)
                    allowed = {m.strip() for m in reply.headers["allow"].split(",")}
                    assert allowed == methods, (method, path)
                    checked += 1
    assert checked > 30
    with TestClient(apps[0]) as client:
        allow = client.options("/notes/x", headers=USER).headers["allow"]
    assert allow == "DELETE, GET, HEAD, PATCH, PUT"

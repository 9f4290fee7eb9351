"""Operator actions on the failed store (pigeon.ops.actions) and the page's forms over
HTTP: a dry run counts, the action needs a reason and a name, one row per action in the
log; a cookie session's forms need the CSRF token and the page's own origin."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from pigeon.exceptions import InvalidOperation
from pigeon.jobs.failed import list_jobs, show_job
from pigeon.ops import actions, web
from pigeon.ops.session import csrf_token
from pigeon.storage.base import Database
from tests.ops.scenario import APP, ops_app, seed
from tests.server.conftest import (
    OPERATOR,
    OPERATOR_TOKEN,
    TestClient,
    live_server,
    operator_token,
)


def test_retry_a_group_and_cancel_by_ids_with_a_log(notes_db: Database) -> None:
    seed(notes_db, 100)
    group = actions.Selection(owner="comms-team", queue="notify", error_class="PermanentError")
    ids, max_id = actions.matching(notes_db, group)
    assert len(ids) == 10 and max_id >= max(ids)
    with pytest.raises(InvalidOperation, match="reason"):
        actions.apply(notes_db, "retry", group, actor="ada", reason="  ")
    with pytest.raises(InvalidOperation, match="who"):
        actions.apply(notes_db, "retry", group, actor="", reason="fixed")
    done = actions.apply(notes_db, "retry", group, actor="ada", reason="mail server back")
    assert (done.matched, done.done, done.skipped) == (10, 10, 0)
    assert {show_job(notes_db, i)["status"] for i in ids} == {"queued"}
    grading = [j["id"] for j in list_jobs(notes_db, status="failed", queue="grading")]
    cancel = actions.Selection(ids=(grading[0], ids[0]))  # ids[0] is no longer failed
    done = actions.apply(notes_db, "cancel", cancel, actor="bob", reason="duplicate")
    assert (done.matched, done.done) == (1, 1)
    assert show_job(notes_db, grading[0])["status"] == "cancelled"
    log = actions.action_log(notes_db)
    assert [(a["action"], a["actor"], a["done"]) for a in log] == [
        ("cancel", "bob", 1),
        ("retry", "ada", 10),
    ]
    assert '"owner":"comms-team"' in log[1]["selection"]


def test_the_forms_over_http_csrf_and_origin(notes_db: Database) -> None:
    seed(notes_db, 50)
    app = ops_app(notes_db)
    form = {"owner": "comms-team", "queue": "notify", "error_class": "PermanentError"}
    with live_server(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        host = url.split("//", 1)[1]
        same = {"Origin": url, "Host": host}
        # the bearer header (a script, curl): no cookie, so no CSRF token needed
        preview = client.post(
            "/pigeon/actions/preview", headers=OPERATOR, data=form | {"do": "retry:group"}
        )
        assert preview.status_code == 200
        assert re.search(r'id="dry-run-count">5<', preview.text)
        # a browser session: signing in needs the page's own origin
        assert (
            client.post("/pigeon/login", data={"token": OPERATOR_TOKEN, "name": "ada"}).status_code
            == 403
        )
        signed = client.post(
            "/pigeon/login", headers=same, data={"token": OPERATOR_TOKEN, "name": "ada"}
        )
        assert signed.status_code == 303
        cookie = client.cookies.get("pigeon_ops")
        assert cookie and OPERATOR_TOKEN not in cookie  # a session id, not the credential
        assert client.get("/pigeon/").status_code == 200
        apply = form | {"action": "retry", "actor": "ada", "reason": "back up"}
        # from another site: refused before anything runs (Origin, then Sec-Fetch-Site)
        evil = {"Origin": "https://evil.example", "Host": host}
        assert client.post("/pigeon/actions/apply", headers=evil, data=apply).status_code == 403
        cross = {**same, "Sec-Fetch-Site": "cross-site"}
        assert client.post("/pigeon/actions/apply", headers=cross, data=apply).status_code == 403
        # same origin but no (or a wrong) CSRF token: refused
        assert client.post("/pigeon/actions/apply", headers=same, data=apply).status_code == 403
        wrong = apply | {"csrf": csrf_token(OPERATOR_TOKEN)}  # keyed by the session, not this
        assert client.post("/pigeon/actions/apply", headers=same, data=wrong).status_code == 403
        assert len(list_jobs(notes_db, status="failed", queue="notify")) == 5
        ok = client.post(
            "/pigeon/actions/apply",
            headers=same,
            data=apply | {"csrf": csrf_token(cookie)},
            follow_redirects=False,
        )
        assert ok.status_code == 303 and "/pigeon/?done=" in ok.headers["location"]
        assert list_jobs(notes_db, status="failed", queue="notify") == []
        # signing out clears the cookie: the page asks to sign in again
        client.post("/pigeon/logout", headers=same, data={})
        assert client.get("/pigeon/", headers={"Accept": "text/html"}).status_code == 401
        # a cookie that is not the operator's gets the sign-in form, never the page
        client.cookies.set("pigeon_ops", "bob.1", path="/pigeon/")
        stale = client.get("/pigeon/", headers={"Accept": "text/html"})
        assert stale.status_code == 401 and "data-figure" not in stale.text


def test_dashboard_app_mounts_in_any_asgi_app(notes_db: Database) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from pigeon.ops import dashboard_app

    seed(notes_db, 20)
    host = Starlette(
        routes=[Mount("/ops", dashboard_app(notes_db, APP, operator=operator_token()))]
    )
    with TestClient(host, base_url="http://testserver") as client:
        page = client.get("/ops/", headers=OPERATOR)
        assert page.status_code == 200 and 'action="/ops/actions/preview"' in page.text
        assert client.get("/ops/v1/dashboard", headers=OPERATOR).json()["records"]["received"] == 20
        assert "pigeon_jobs{" in client.get("/ops/metrics", headers=OPERATOR).text
        assert client.get("/ops/").status_code == 401
        assert client.get("/ops/", headers={"Accept": "text/html"}).text.count("/ops/login") == 1
        assert client.get("/ops/metrics").status_code == 401
        signed = client.post(
            "/ops/login",
            headers={"Origin": "http://testserver"},
            data={"token": OPERATOR_TOKEN, "name": "ada"},
            follow_redirects=False,
        )
        assert signed.status_code == 303 and signed.headers["location"] == "/ops/"
        assert "Path=/ops/" in signed.headers["set-cookie"]


def test_every_page_renders_off_the_event_loop(
    notes_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A page's rendering, and the first one's Jinja2 import and compiling (~50 ms), held
    # the event loop: each is now rendered in a worker thread, where no loop runs.
    on_loop: list[str] = []
    real = web.templates

    def watched() -> object:
        try:
            asyncio.get_running_loop()
            on_loop.append("a page")
        except RuntimeError:
            pass
        return real()

    monkeypatch.setattr(web, "templates", watched)
    seed(notes_db, 20)
    app = ops_app(notes_db)
    same = {"Origin": "http://testserver"}
    html = {"Accept": "text/html"}
    with TestClient(app, base_url="http://testserver") as client:
        answers = [
            client.get("/pigeon/", headers=OPERATOR),  # the page
            client.get("/pigeon/", headers=html),  # the guard's sign-in form, 401
            client.get("/pigeon/login"),
            client.post("/pigeon/login", headers=same, data={"token": "no", "name": "ada"}),
            client.post("/pigeon/login", headers=same, data={"token": OPERATOR_TOKEN}),
            client.post("/pigeon/actions/preview", headers=OPERATOR, data={"do": "retry:group"}),
            client.post("/pigeon/actions/preview", headers=OPERATOR, data={"do": "nothing:x"}),
            client.post(
                "/pigeon/actions/apply", headers=OPERATOR, data={"action": "retry", "job": "x"}
            ),
        ]
    statuses = [a.status_code for a in answers]
    assert statuses == [200, 401, 200, 401, 401, 200, 400, 400], statuses
    assert all("text/html" in a.headers["content-type"] for a in answers)
    assert on_loop == []

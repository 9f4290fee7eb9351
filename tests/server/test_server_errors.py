"""A 5xx says what failed in general terms and gives an error id; the exception's text
stays in no answer (issue 21: ``handler-failed`` bodies carried ``f"{type}: {exc}"``).

Every way application code can fail a request is tried with a canary in the exception's
message, over real HTTP (uvicorn in a thread): a handler (one operation, grouped or not,
and a batch entry), a request check (one operation: ``intake-failed``; a batch: the
whole batch), and a read route. Each answer is problem+json without the canary, and its
``error_id`` is the one on the log record that tells of the failure.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from pigeon.server import access
from pigeon.server.app import create_app
from pigeon.server.intake import Intake, IntakeContext
from pigeon.storage.base import Database

from .conftest import live_server

CANARY = "canary-" + uuid.uuid4().hex
USER = {"Authorization": "Bearer ada.x"}


def raising(*_: Any) -> Any:
    raise RuntimeError(f"could not store {CANARY}")


def fine(ctx: IntakeContext) -> Any:
    return 201, {"ok": True}


def app_of(notes_db: Database, *, group_commit: bool) -> Any:
    intake = Intake(notes_db)
    intake.add_operation("POST", "/handler", raising)
    intake.add_operation("POST", "/check", fine, validate=raising)
    read = access.user(Route("/read", raising, methods=["GET"]))
    return create_app(intake, routes=[read], purge_interval=None, group_commit=group_commit)


def keyed() -> dict[str, str]:
    return USER | {"Idempotency-Key": str(uuid.uuid4())}


def entry(path: str) -> dict[str, Any]:
    return {"idempotency_key": str(uuid.uuid4()), "method": "POST", "path": path, "body": {}}


def logged_ids(caplog: pytest.LogCaptureFixture) -> set[str]:
    return {getattr(rec, "error_id", None) for rec in caplog.records} - {None}


def assert_told_by_id(body: dict[str, Any], slug: str, ids: set[str]) -> None:
    assert body["type"].endswith(slug) and body["status"] == 500
    assert CANARY not in json.dumps(body) and "RuntimeError" not in json.dumps(body)
    assert body["error_id"] in body["detail"] and body["error_id"] in ids


@pytest.mark.parametrize("group_commit", [False, True])
def test_a_failure_answers_an_error_id_and_never_the_exceptions_text(
    notes_db: Database, group_commit: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with live_server(app_of(notes_db, group_commit=group_commit)) as url:
        handler = httpx.post(url + "/handler", json={}, headers=keyed())
        check = httpx.post(url + "/check", json={}, headers=keyed())
        read = httpx.get(url + "/read", headers=USER)
        batch = httpx.post(
            url + "/pigeon/v1/batch",
            json={"operations": [entry("/handler")]},
            headers=USER,
        )
        whole = httpx.post(
            url + "/pigeon/v1/batch", json={"operations": [entry("/check")]}, headers=USER
        )
    ids = logged_ids(caplog)
    assert_told_by_id(handler.json(), "handler-failed", ids)
    # Grouped, the intake answers for each request of the group; alone, the app does.
    assert_told_by_id(check.json(), "intake-failed" if group_commit else "internal-error", ids)
    assert_told_by_id(read.json(), "internal-error", ids)
    assert batch.status_code == 200
    (answer,) = batch.json()["results"]
    assert answer["status"] == 500
    assert_told_by_id(answer["body"], "handler-failed", ids)
    assert_told_by_id(whole.json(), "internal-error", ids)
    for response in (handler, check, read, batch, whole):
        assert CANARY not in response.text
    assert len(ids) == 5  # one id a failure, each on its own log line
    assert CANARY not in caplog.text


def test_a_log_line_names_its_error_id(
    caplog: pytest.LogCaptureFixture, notes_db: Database
) -> None:
    """The text format too: the id is in the message, found with grep."""
    caplog.set_level(logging.INFO)
    with live_server(app_of(notes_db, group_commit=False)) as url:
        error_id = httpx.post(url + "/handler", json={}, headers=keyed()).json()["error_id"]
    (line,) = [r.getMessage() for r in caplog.records if getattr(r, "error_id", "") == error_id]
    assert f"[error {error_id}]" in line and "RuntimeError" in line

"""Issue 21, items 2 and 6, replayed from outside against ``pigeon serve`` as deployed:
hostile path parameters, principals, token dates, content types, clock stamps, the 405's
``Allow`` and the test hooks' two keys. Each gets its documented answer on both backends,
and nothing of it is a 5xx."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests import processes

from .conftest import PIGEON, Deployed, serve, stop

HOSTILE_PATHS = (
    "/notes/%00",
    "/notes/a%00b",
    "/notes/a%0Ab",
    "/notes/%E2%80%AE",
    "/notes/%ED%A0%80",
    "/notes/%FF",
    "/notes/" + "x" * 256,
    "/answers/%00",
    "/pigeon/v1/records/%00",
    "/lww-notes/%00",
    "/docs/%0D%0A",
)


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


def test_hostile_path_parameters_are_400_bad_path(deployed: Deployed) -> None:
    for path in HOSTILE_PATHS:
        for headers in (deployed.user("ada"), deployed.operator):
            for method in ("GET", "PUT", "DELETE"):
                reply = httpx.request(
                    method, deployed.url + path, headers=headers | key(), json={"id": "x"}
                )
                assert reply.status_code == 400, (method, path, reply.text)
                assert reply.json()["type"].endswith(":bad-path"), (method, path)
    log = deployed.log.read_text()
    assert " 500" not in log and "Traceback" not in log


def test_a_principal_that_is_no_printable_text_is_401(deployed: Deployed) -> None:
    for subject in ("\ud800x", "a\x00b", "\u202eadmin"):
        headers = {"Authorization": f"Bearer {deployed.token(subject)}"} | key()
        for method, path in (("GET", "/notes"), ("GET", "/notes/x"), ("POST", "/notes")):
            reply = httpx.request(method, deployed.url + path, headers=headers, json={"id": "x"})
            assert reply.status_code == 401, (subject, method, path, reply.text)


def test_token_dates_must_be_numbers_in_the_calendar(deployed: Deployed) -> None:
    later = int(time.time()) + 600
    for exp in (str(later), 1e308, 10**12):
        headers = {"Authorization": f"Bearer {deployed.token('ada', exp=exp)}"}
        reply = httpx.get(deployed.url + "/notes", headers=headers)
        assert reply.status_code == 401, (exp, reply.text)
    assert httpx.get(deployed.url + "/notes", headers=deployed.user("ada")).status_code == 200


def test_a_write_not_declared_json_is_415(deployed: Deployed) -> None:
    note = b'{"id": "ct", "title": "t"}'
    batch = b'{"operations": []}'
    for path, body in (("/notes", note), ("/pigeon/v1/batch", batch)):
        for media in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = deployed.user("ada") | key()
            if media is not None:
                headers["Content-Type"] = media
            reply = httpx.post(deployed.url + path, content=body, headers=headers)
            assert reply.status_code == 415, (path, media, reply.text)
        typed = deployed.user("ada") | key() | {"Content-Type": "application/json; charset=utf-8"}
        assert httpx.post(deployed.url + path, content=body, headers=typed).status_code < 300


def test_an_absurd_clock_stamp_is_refused_naming_its_header(deployed: Deployed) -> None:
    for stamp in ("9" * 40 + "-0-n", "253402300800000-0000000000-n", "5-99999999999-n"):
        headers = deployed.user("ada") | key() | {"X-Pigeon-Clock": stamp}
        reply = httpx.post(deployed.url + "/notes", json={"id": "clk"}, headers=headers)
        assert reply.status_code == 400, (stamp, reply.text)
        assert "X-Pigeon-Clock" in reply.json()["detail"]


def test_allow_lists_every_method_of_the_path(deployed: Deployed) -> None:
    reply = httpx.options(deployed.url + "/notes/x", headers=deployed.user("ada"))
    assert reply.status_code == 405
    assert reply.headers["allow"] == "DELETE, GET, HEAD, PATCH, PUT"


def test_test_hooks_take_two_keys_and_no_proxied_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "hooks.db")
    monkeypatch.delenv("PIGEON_TEST_HOOKS", raising=False)
    alone = processes.run(
        [*PIGEON, "serve", "--db", db, "--port", "0", "--test-hooks"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert alone.returncode == 2 and "PIGEON_TEST_HOOKS=1" in alone.stderr
    monkeypatch.setenv("PIGEON_TEST_HOOKS", "1")
    proc, url, _ = serve(db, tmp_path, "--test-hooks")
    try:
        deployed = Deployed(url=url, backend="sqlite", db=db, log=tmp_path / "serve.log")
        headers = deployed.user("ada") | key() | {"X-Pigeon-Test-Fail": "1"}
        proxied = headers | {"X-Forwarded-For": "203.0.113.9"}
        reply = httpx.post(url + "/notes", json={"id": "h"}, headers=proxied)
        assert reply.status_code == 400 and "proxy" in reply.json()["detail"]
        assert httpx.post(url + "/notes", json={"id": "h"}, headers=headers).status_code == 500
    finally:
        stop(proc)

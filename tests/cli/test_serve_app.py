"""``pigeon serve --app module:factory``: the user's own app (tests/cli/orders_app.py, not
the reference one) served by a real ``pigeon serve`` process over real HTTP, with the
command's options (JWT, operator, limits, claim mode, test hooks) in every worker process;
a bad ``--app`` refused in one line saying what is wrong with it."""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import jwt
import pytest

from pigeon.cli.serve_cmd import serve
from pigeon.server.options import ServerOptions
from tests import processes
from tests.waiting import until_answers

from .test_serve_cmd import PIGEON

APP = "tests.cli.orders_app:make"
SECRET = "the-serve-app-tests-hs256-secret-0123456789"
OPERATOR = "operator-token-of-the-serve-app-tests"


def serving(
    db: Path, *extra: str, env: dict[str, str], probe: str = "/pigeon/v1/health"
) -> tuple[subprocess.Popen[str], str, str]:
    """``pigeon serve`` (its first line, its URL) once it answers its ``probe``."""
    proc = processes.spawn(
        [*PIGEON, "serve", "--db", str(db), "--port", "0", *extra],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("pigeon serving on http://"), line
    url = line.split()[3]
    until_answers(url + probe, proc=proc)
    return proc, url, line


def user(principal: str) -> dict[str, str]:
    claims = {"sub": principal, "exp": int(time.time()) + 600}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, 'HS256')}"}


def order(url: str, key: str, body: object, **headers: str) -> httpx.Response:
    with httpx.Client() as client:  # a new connection each: either worker may take it
        return client.post(url + "/orders", json=body, headers={"Idempotency-Key": key, **headers})


@pytest.mark.slow
def test_a_users_factory_is_served_with_every_option_in_every_worker(tmp_path: Path) -> None:
    secret_file = tmp_path / "jwt-secret"
    secret_file.write_text(SECRET)
    secret_file.chmod(0o600)
    args = ["--app", APP, "--workers", "2", "--auth", "jwt", "--jwt-secret", f"@{secret_file}"]
    args += ["--max-body", "300", "--claim-mode", "separate", "--test-hooks"]
    env = {"PIGEON_OPERATOR_TOKEN": OPERATOR, "PIGEON_TEST_HOOKS": "1"}
    proc, url, line = serving(tmp_path / "shop.db", *args, env=env)
    try:
        assert line.rstrip().endswith(f": the app {APP}"), line
        ada = user("ada")
        first = order(url, "k1", {"id": "o1", "item": "tea"}, **ada)
        again = order(url, "k1", {"id": "o1", "item": "tea"}, **ada)
        assert first.status_code == 201, first.text
        assert again.headers["idempotent-replayed"] == "true" and again.content == first.content
        assert order(url, "k2", {"id": "o2", "item": "x"}).status_code == 401  # no token
        demo = {"Authorization": "Bearer ada.1"}  # the stand-in's: not a JWT
        assert order(url, "k2", {"id": "o2", "item": "x"}, **demo).status_code == 401
        big = order(url, "k3", {"id": "o3", "item": "x" * 400}, **ada)
        assert big.status_code == 413  # --max-body
        failed = order(
            url, "k4", {"id": "o4", "item": "cake"}, **ada, **{"X-Pigeon-Test-Fail": "1"}
        )
        assert failed.status_code == 500  # --test-hooks: written, failed, rolled back
        assert order(url, "k4", {"id": "o4", "item": "cake"}, **ada).status_code == 201
        mine = httpx.get(url + "/orders", headers=ada).json()["orders"]
        assert mine == [{"id": "o1", "item": "tea"}, {"id": "o4", "item": "cake"}]
        spec = httpx.get(url + "/pigeon/v1/openapi.json").json()
        assert spec["info"]["title"] == "shop"
        assert spec["x-pigeon-idempotency"]["claim_mode"] == "separate"
        seen = _each_worker(url)
        assert len(seen) == 2, seen
        first_seen, second_seen = seen.values()
        assert first_seen["options"] == second_seen["options"]  # the same options in both
        assert f"app='{APP}'" in first_seen["options"] and "max_body=300" in first_seen["options"]
        for served in seen.values():
            assert served["serve_environ"] == []  # none came through the environment
            assert served["secret_sha256"] == hashlib.sha256(SECRET.encode()).hexdigest()
    finally:
        processes.stop(proc)


def _each_worker(url: str) -> dict[int, dict[str, object]]:
    """``GET /served`` over new connections until both workers answered (or 30 s)."""
    seen: dict[int, dict[str, object]] = {}
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:
        with httpx.Client() as client:
            served = client.get(url + "/served", headers={"Authorization": f"Bearer {OPERATOR}"})
        assert served.status_code == 200, served.text
        seen[served.json()["pid"]] = served.json()
    return seen


def test_without_app_the_first_line_says_the_reference_app_is_served(tmp_path: Path) -> None:
    proc, _, line = serving(tmp_path / "s.db", env={})
    processes.stop(proc)
    assert "the reference notes app" in line and "--app" in line, line


def test_an_asgi_app_object_is_served_as_it_is(tmp_path: Path) -> None:
    app = "tests.cli.orders_app:ready"
    proc, url, line = serving(tmp_path / "s.db", "--app", app, env={}, probe="/ping")
    try:
        assert httpx.get(url + "/ping").json() == {"pong": True}
        assert line.rstrip().endswith(f": the app {app}"), line
    finally:
        processes.stop(proc)


@pytest.mark.parametrize(
    ("app", "says"),
    [
        ("tests.cli.orders_app", "must look like 'package.module:attr'"),
        ("../orders_app:make", "must look like 'package.module:attr'"),
        ("no_such_module_of_the_tests:make", "cannot import 'no_such_module_of_the_tests'"),
        ("tests.cli.orders_app:nothing", "has no attribute 'nothing'"),
        ("tests.cli.orders_app:ORDER", "is a dict: neither an ASGI app nor a factory"),
        ("tests.cli.orders_app:two_arguments", "cannot be called with the ServerOptions alone"),
        ("tests.cli.orders_app:not_an_app", "returned a dict, not an ASGI app"),
    ],
)
def test_a_bad_app_is_refused_in_one_line_saying_what_is_wrong(
    tmp_path: Path, app: str, says: str
) -> None:
    db = tmp_path / "s.db"
    result = processes.run(
        [*PIGEON, "serve", "--db", str(db), "--port", "0", "--app", app],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"COLUMNS": "300"},
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "serving on" not in result.stdout
    assert says in " ".join(result.stderr.replace("│", " ").split()), result.stderr
    if app != "tests.cli.orders_app:not_an_app":  # refused before any file was made
        assert not db.exists()


def test_an_asgi_app_object_refuses_the_options_it_cannot_take(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    args = ["--app", "tests.cli.orders_app:ready", "--max-body", "100", "--operator-token"]
    result = processes.run(
        [*PIGEON, "serve", "--db", str(db), "--port", "0", *args, str(uuid.uuid4())],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"COLUMNS": "300"},
    )
    assert result.returncode == 2, result.stdout + result.stderr
    said = " ".join(result.stderr.replace("│", " ").split())
    assert "an ASGI app" in said and "--max-body" in said and "--operator-token" in said, said
    assert not db.exists()


@pytest.mark.parametrize(
    ("app", "says"),
    [
        ("tests.cli.orders_app", "must look like 'package.module:attr'"),
        ("no_such_module_of_the_tests:app", "cannot import 'no_such_module_of_the_tests'"),
        ("tests.cli.orders_app:nothing", "has no attribute 'nothing'"),
    ],
)
def test_pigeon_worker_refuses_a_bad_app_in_the_same_words(
    tmp_path: Path, app: str, says: str
) -> None:
    """``pigeon worker --app`` reads its reference as ``pigeon serve --app`` does."""
    from pigeon.storage.server import open_server_db

    db = tmp_path / "s.db"
    open_server_db(db).close()
    result = processes.run(
        [*PIGEON, "worker", "--db", str(db), "--queue", "grading=1", "--app", app],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"COLUMNS": "300"},
    )
    assert result.returncode == 2, result.stdout + result.stderr
    said = " ".join(result.stderr.replace("│", " ").split())
    assert "Traceback" not in said and "'--app'" in said and says in said, said


def test_a_factory_failing_in_the_worker_processes_stops_the_server(tmp_path: Path) -> None:
    """With ``--workers 2`` the factory runs in each worker: one that returns no app is one
    line from each worker, and the server stops (uvicorn's supervisor would otherwise start
    them again for ever) with uvicorn's startup-failure status."""
    app = "tests.cli.orders_app:not_an_app"
    args = ["--db", str(tmp_path / "s.db"), "--port", "0", "--app", app, "--workers", "2"]
    result = processes.run(
        [*PIGEON, "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"pigeon serve: {app} returned a dict, not an ASGI app" in result.stderr


def test_the_commands_defaults_are_the_options_defaults() -> None:
    # An app's own setting holds where the command's value is its default (over_own,
    # the refusal of options an ASGI app cannot take): the two defaults must be one.
    given = {n: p.default for n, p in inspect.signature(serve).parameters.items()}
    usual = ServerOptions()
    policy = usual.intake.policy
    assert (given["lock_timeout"], given["response_retention"], given["claim_retention"]) == (
        policy.lock_timeout, policy.response_retention, policy.claim_retention,
    )  # fmt: skip
    assert (given["max_body"], given["max_batch_body"]) == (
        usual.limits.max_body, usual.limits.max_batch_body,
    )  # fmt: skip

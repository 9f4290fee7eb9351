"""``pigeon serve``'s safe defaults: no anonymous writes, no unverified tokens off
loopback, the operator routes for the operator token alone, real JWTs with --auth jwt."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import jwt
import pytest

from pigeon.exceptions import ConfigurationError
from pigeon.server.auth_options import AuthOptions, is_loopback
from pigeon.server.jwt_auth import JwtAuth
from tests import processes

from .test_serve_cmd import start

PIGEON = [sys.executable, "-c", "from pigeon.cli import main; main()"]
OPERATOR_TOKEN = "operator-token-of-the-serve-auth-tests"
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
SECRET = "the-serve-tests-hs256-secret-0123456789"


def run(
    db: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``pigeon serve`` with arguments it must refuse: it must exit, not serve."""
    env = {"COLUMNS": "200"} | (env or {})
    return processes.run(
        [*PIGEON, "serve", "--db", str(db), "--port", "0", *extra],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | env,
    )


def said(result: subprocess.CompletedProcess[str]) -> str:
    """The error message, without the box rich draws around it."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", result.stderr).split())


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def write(url: str, headers: dict[str, str]) -> httpx.Response:
    key = {"Idempotency-Key": str(uuid.uuid4())}
    return httpx.post(url + "/notes", json={"id": uuid.uuid4().hex}, headers=key | headers)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "example.org"])
def test_the_demo_stand_in_refuses_a_non_loopback_address(tmp_path: Path, host: str) -> None:
    db = tmp_path / "server.db"
    result = run(db, "--host", host)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "serving on" not in result.stdout
    message = said(result)
    assert "not a loopback address" in message and "--auth jwt" in message
    assert "--insecure" in message
    assert not db.exists()


def test_insecure_lets_the_stand_in_listen_anywhere(tmp_path: Path) -> None:
    proc, url = start(tmp_path / "s.db", "--host", "0.0.0.0", "--insecure", env={})
    try:
        assert httpx.get(url.replace("0.0.0.0", "127.0.0.1") + "/pigeon/v1/health").is_success
    finally:
        processes.stop(proc)


@pytest.mark.parametrize(
    ("extra", "env", "says"),
    [
        (["--auth", "jwt"], {}, "needs exactly one of --jwt-secret"),
        (["--auth", "jwt", "--jwt-secret", "too-short"], {}, "at least 32"),
        (["--auth", "jwt"], {"PIGEON_JWT_SECRET": "too-short"}, "at least 32"),
        (["--jwt-secret", SECRET], {}, "add --auth jwt"),
        (["--operator-token", "short-secret"], {}, "at least 16 characters"),
        (["--allow-anonymous", "--require-auth"], {}, "contradict"),
        (["--auth", "jwt", "--jwt-key-file", "/nonexistent/key.pem"], {}, "cannot read"),
        (["--auth", "jwt", "--jwt-secret", SECRET, "--jwt-leeway", "9999"], {}, "leeway"),
    ],
)
def test_options_that_cannot_serve_safely_are_refused_without_echoing_secrets(
    tmp_path: Path, extra: list[str], env: dict[str, str], says: str
) -> None:
    db = tmp_path / "server.db"
    result = run(db, *extra, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    message = said(result)
    assert says in message and "Traceback" not in result.stderr
    for secret in ("too-short", "short-secret", SECRET):
        assert secret not in result.stderr
    assert not db.exists()


def test_serve_defaults_refuse_anonymous_and_keep_the_operator_routes(tmp_path: Path) -> None:
    env = {"PIGEON_OPERATOR_TOKEN": OPERATOR_TOKEN}
    proc, url = start(tmp_path / "s.db", env=env)
    user = {"Authorization": "Bearer ada.1"}
    try:
        anonymous = write(url, {})
        assert anonymous.status_code == 401
        assert anonymous.headers["content-type"] == "application/problem+json"
        assert write(url, user).status_code == 201
        assert httpx.get(url + "/pigeon/v1/ledger").status_code == 401
        assert httpx.get(url + "/pigeon/v1/ledger", headers=user).status_code == 404
        ledger = httpx.get(url + "/pigeon/v1/ledger", headers=OPERATOR)
        assert [row["principal"] for row in ledger.json()["entries"]] == ["ada"]
        assert httpx.get(url + "/metrics", headers=OPERATOR).status_code == 200
        assert httpx.get(url + "/metrics", headers=user).status_code == 404
    finally:
        processes.stop(proc)


def test_allow_anonymous_makes_every_caller_without_a_token_one_user(tmp_path: Path) -> None:
    proc, url = start(tmp_path / "s.db", "--allow-anonymous", env={})
    try:
        assert write(url, {}).status_code == 201
        notes = httpx.get(url + "/notes").json()["notes"]
        assert len(notes) == 1  # another caller without a token sees the same notes
        assert httpx.get(url + "/pigeon/v1/ledger").status_code == 401  # nobody's operator
    finally:
        processes.stop(proc)


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_with_jwt_verifies_tokens_in_every_worker(tmp_path: Path, workers: str) -> None:
    env = {"PIGEON_JWT_SECRET": SECRET, "PIGEON_OPERATOR_TOKEN": OPERATOR_TOKEN}
    extra = ["--auth", "jwt", "--jwt-audience", "pigeon", "--jwt-issuer", "https://id.test"]
    proc, url = start(tmp_path / "s.db", *extra, "--workers", workers, env=env)
    now = int(time.time())
    good = {"sub": "Ada", "aud": "pigeon", "iss": "https://id.test", "exp": now + 60}
    try:
        for _ in range(4):  # several connections: each worker process must verify alike
            token = jwt.encode(good, SECRET, algorithm="HS256")
            with httpx.Client() as client:
                reply = client.post(
                    url + "/notes",
                    json={"id": uuid.uuid4().hex},
                    headers={
                        "Idempotency-Key": str(uuid.uuid4()),
                        "Authorization": f"Bearer {token}",
                    },
                )
            assert reply.status_code == 201, reply.text
        for bad in (good | {"aud": "other"}, good | {"exp": now - 300}):
            assert write(url, bearer(jwt.encode(bad, SECRET, algorithm="HS256"))).status_code == 401
        assert write(url, {"Authorization": "Bearer Ada.1"}).status_code == 401  # no stand-in
        ledger = httpx.get(url + "/pigeon/v1/ledger", headers=OPERATOR).json()["entries"]
        assert {row["principal"] for row in ledger} == {"Ada"}
    finally:
        processes.stop(proc)


def test_the_help_says_what_anonymous_means_first() -> None:
    result = processes.run(
        [*PIGEON, "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"COLUMNS": "100"},
    )
    top = " ".join(result.stdout.split("╭")[0].split())
    assert "--allow-anonymous" in top and "ONE user, 'anonymous'" in top
    assert "--auth demo" in top and "loopback" in top


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("localhost.example.org", False),
        ("myhost", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_jwt_with_a_real_key_may_listen_anywhere_and_options_round_trip(tmp_path: Path) -> None:
    options = AuthOptions(
        auth="jwt", jwt_secret=SECRET, jwt_audience="a", operator_token=OPERATOR_TOKEN
    )
    options.check("0.0.0.0", insecure=False)
    # What a worker process gets: the same options, pickled with uvicorn's configuration.
    assert pickle.loads(pickle.dumps(options)) == options
    bounded = AuthOptions(auth="jwt", jwt_secret=SECRET, jwt_max_lifetime=3600.0)
    assert pickle.loads(pickle.dumps(bounded)) == bounded
    auth = bounded.authenticator()
    assert isinstance(auth, JwtAuth) and auth.max_lifetime == 3600.0
    assert SECRET not in repr(options) and OPERATOR_TOKEN not in repr(options)
    with pytest.raises(ConfigurationError, match="not a loopback address"):
        AuthOptions().check("10.0.0.1", insecure=False)
    AuthOptions().check("10.0.0.1", insecure=True)

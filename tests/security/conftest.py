"""``pigeon serve`` as the README deploys it for production, on each backend, for the
security regression tests: ``--auth jwt`` with the secret and the operator token from the
environment, a key file for encryption at rest, logs at info. Each test replays a finding
from outside, over real HTTP, and expects the documented answer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jwt
import pytest

from pigeon.cli import keys_cmd
from tests import processes
from tests.waiting import until_answers

PIGEON = [sys.executable, "-c", "from pigeon.cli import main; main()"]
OPERATOR_TOKEN = "operator-token-of-the-security-tests"
JWT_SECRET = "the-security-tests-hs256-secret-0123456789abcdef"


@dataclass(frozen=True)
class Deployed:
    """A running ``pigeon serve``: its base URL, backend, database and log file."""

    url: str
    backend: str
    db: str
    log: Path

    def token(self, principal: str, **claims: object) -> str:
        payload: dict[str, object] = {"sub": principal, "exp": int(time.time()) + 600}
        return jwt.encode(payload | claims, JWT_SECRET, algorithm="HS256")

    def user(self, principal: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(principal)}"}

    @property
    def operator(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


def stop(proc: subprocess.Popen[str]) -> None:
    """Kill the server's whole process group (its uvicorn workers included)."""
    processes.stop(proc)


def serve(db: str, tmp: Path, *extra: str) -> tuple[subprocess.Popen[str], str, Path]:
    keys = tmp / "keys.json"
    if not keys.exists():  # made as `pigeon keys generate --file` makes it, in process
        keys_cmd.generate(file=str(keys))
    log = tmp / "serve.log"
    env = os.environ | {
        "PIGEON_AUTH": "jwt",
        "PIGEON_JWT_SECRET": JWT_SECRET,
        "PIGEON_OPERATOR_TOKEN": OPERATOR_TOKEN,
    }
    with log.open("a") as err:
        proc = processes.spawn(
            [
                *PIGEON,
                "serve",
                "--db",
                db,
                "--port",
                "0",
                "--keys-file",
                str(keys),
                "--log-level",
                "info",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("pigeon serving on http://"):
        stop(proc)
        raise AssertionError(f"pigeon serve did not start: {line!r}; {log.read_text()}")
    url = line.split()[3]
    until_answers(url + "/pigeon/v1/health", proc=proc)
    return proc, url, log


@pytest.fixture(params=["sqlite", "postgres"])
def deployed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployed]:
    """``pigeon serve`` deployed for production on each backend; killed at teardown."""
    if request.param == "postgres":
        db: str = request.getfixturevalue("pg_url")
    else:
        db = str(tmp_path / "server.db")
    proc, url, log = serve(db, tmp_path)
    try:
        yield Deployed(url=url, backend=request.param, db=db, log=log)
    finally:
        stop(proc)

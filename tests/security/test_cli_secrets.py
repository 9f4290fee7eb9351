"""Issue 21, item 4, replayed from outside: ``pigeon serve`` deployed with its database
URL and broker URL carrying passwords. They come from owner-only files (``@FILE``), so no
other user of the machine reads them in the process's arguments, and neither the output,
the log (at info, with the relay failing against a broker that is down) nor the error the
relay stores on the outbox row shows them. A file open to others is refused."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests import processes

from .conftest import OPERATOR_TOKEN, PIGEON, Deployed, serve, stop


def _secret_file(path: Path, text: str) -> str:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return f"@{path}"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_passwords_are_in_no_argument_output_or_log(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    canary = f"Cnry{uuid.uuid4().hex[:12]}"
    if backend == "postgres":
        url: str = request.getfixturevalue("pg_url")  # trust auth: the password is unused
        db = url.replace("postgresql://postgres@", f"postgresql://postgres:{canary}@")
        assert canary in db
    else:
        db = str(tmp_path / "server.db")
    broker = f"redis://:{canary}@127.0.0.1:1/0"  # down: the relay fails and says so
    proc, base, log = serve(
        _secret_file(tmp_path / "db-url", db),
        tmp_path,
        "--relay-to",
        _secret_file(tmp_path / "broker-url", broker),
    )
    try:
        arguments = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
        assert canary not in arguments  # what `ps` shows every user
        reply = httpx.post(
            base + "/answers",
            json={"question": "q", "answer": "4"},
            headers={"Idempotency-Key": str(uuid.uuid4()), **_user(base)},
            timeout=10,
        )
        assert reply.status_code == 202, reply.text
        deadline = time.monotonic() + 30
        while "failed" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "publishing outbox message" in log.read_text()  # the relay met the error
        dashboard = httpx.get(
            base + "/pigeon/v1/dashboard",
            headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
            timeout=10,
        ).text
    finally:
        stop(proc)
    assert proc.stdout is not None
    assert canary not in proc.stdout.read() + log.read_text() + dashboard


def test_a_secret_file_others_can_read_is_refused(tmp_path: Path) -> None:
    loose = tmp_path / "broker-url"
    loose.write_text("redis://:pw@127.0.0.1:6379/0\n")
    loose.chmod(0o640)
    result = processes.run(
        [*PIGEON, "serve", "--db", str(tmp_path / "s.db"), "--port", "0", "--relay-to",
         f"@{loose}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "chmod 600" in " ".join(result.stderr.split())
    assert not (tmp_path / "s.db").exists()


def _user(base: str) -> dict[str, str]:
    return Deployed(url=base, backend="", db="", log=Path()).user("ada")

"""Issue 21, items 11, 12 and 7's batch entry, replayed from outside as a deployer meets
them: ``pigeon relay --help`` as a process (it was a rich MarkupError traceback), a NATS
``subject_prefix`` without its trailing '.' refused before anything starts (one line, exit
2; it was taken and retried for ever), and a batch entry whose ``if_match`` is no string
refused for that entry alone by the deployed server."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import httpx

from tests import processes

from .conftest import PIGEON, Deployed

BAD_PREFIX = "nats://127.0.0.1:4222?subject_prefix=audit"
WIDE = os.environ | {"COLUMNS": "250"}


def test_relay_help_exits_0_and_shows_the_url_patterns() -> None:
    result = processes.run(
        [*PIGEON, "relay", "--help"], capture_output=True, text=True, env=WIDE, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert "redis://host[:port][/db]" in result.stdout


def _one_line_exit_2(args: list[str], command: str) -> str:
    result = processes.run([*PIGEON, *args], capture_output=True, text=True, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith(f"pigeon {command}: "), lines
    return lines[0]


def test_a_subject_prefix_without_its_dot_is_refused_before_start(deployed: Deployed) -> None:
    line = _one_line_exit_2(["relay", "--db", deployed.db, "--to", BAD_PREFIX], "relay")
    assert "ends with '.'" in line


def test_serve_refuses_the_same_broker_url_before_binding(tmp_path: Path) -> None:
    """``--relay-to`` is checked by the same rule; nothing is created."""
    db = tmp_path / "s.db"
    args = ["serve", "--db", str(db), "--port", "0", "--relay-to", BAD_PREFIX]
    assert "ends with '.'" in _one_line_exit_2(args, "serve")
    assert not db.exists()


def test_a_batch_entry_s_if_match_must_be_a_short_string(deployed: Deployed) -> None:
    """A batch entry's ``if_match`` that is no string of at most 255 characters: that
    entry alone gets 400, the rest of the batch is applied."""
    for value in (7, True, ["v1"], {"etag": "v1"}, "9" * 300):
        note = uuid.uuid4().hex
        entry = {"method": "PUT", "path": f"/notes/{note}", "body": {"id": note, "body": "b"}}
        fine = {"method": "POST", "path": "/notes", "body": {"id": uuid.uuid4().hex}}
        operations = [
            entry | {"idempotency_key": str(uuid.uuid4()), "if_match": value},
            fine | {"idempotency_key": str(uuid.uuid4())},
        ]
        reply = httpx.post(
            deployed.url + "/pigeon/v1/batch",
            json={"operations": operations},
            headers=deployed.user("ada"),
            timeout=30,
        )
        assert reply.status_code == 200, reply.text
        refused, accepted = reply.json()["results"]
        assert refused["status"] == 400, (value, refused)
        assert accepted["status"] == 201, accepted

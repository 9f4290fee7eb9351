"""``pigeon keys generate / status / rotate``, and the keys reaching ``pigeon jobs``,
``pigeon queue``, ``pigeon serve`` and ``pigeon worker`` (refused up front when unusable)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from pigeon.cli import app
from pigeon.edge.queue import OfflineQueue
from pigeon.jobs import records
from pigeon.jobs.job import JobSpec
from pigeon.jobs.manager import AttemptOutcome, JobManager
from pigeon.storage.crypto import Keyring
from pigeon.storage.server import open_server_db

runner = CliRunner()
SECRET = "cli-canary-9e1"


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


def _keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys"
    result = run("keys", "generate", "--id", "one", "--file", str(path))
    assert result.exit_code == 0, result.output
    return path


def test_generate_prints_a_key_or_adds_it_to_a_0600_file_as_current(tmp_path: Path) -> None:
    printed = run("keys", "generate", "--id", "solo")
    assert printed.exit_code == 0
    assert Keyring.parse(printed.stdout.strip()).ids == ("solo",)
    path = _keys_file(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = run("keys", "generate", "--id", "two", "--file", str(path))
    assert second.exit_code == 0 and "two" in second.output
    assert Keyring.from_file(path).ids == ("two", "one")  # the new key first: current
    assert Keyring.parse(printed.stdout).keys[0][1] not in dict(Keyring.from_file(path).keys)
    again = run("keys", "generate", "--id", "two", "--file", str(path))
    assert again.exit_code == 2 and "already" in again.output
    # The key itself never reaches the output when it goes to a file.
    (entry,) = [line for line in path.read_text().splitlines() if line.startswith("two:")]
    assert entry.split(":", 1)[1] not in second.output


def test_a_key_file_others_can_read_is_refused_everywhere(tmp_path: Path) -> None:
    path = _keys_file(tmp_path)
    os.chmod(path, 0o644)
    db = tmp_path / "s.db"
    open_server_db(db).close()
    for args in (
        ("keys", "status", "--db", str(db), "--keys-file", str(path)),
        ("keys", "rotate", "--db", str(db), "--keys-file", str(path)),
        ("keys", "generate", "--file", str(path)),
        ("worker", "--db", str(db), "--queue", "grading=1", "--keys-file", str(path)),
        ("serve", "--db", str(db), "--port", "0", "--keys-file", str(path)),
    ):
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "chmod 600" in result.output, (args, result.output)


def test_status_and_rotate_from_the_command_line(tmp_path: Path) -> None:
    path = _keys_file(tmp_path)
    db_path = str(tmp_path / "s.db")
    db = open_server_db(db_path, keyring=Keyring.from_file(path))
    with db.transaction() as tx:
        records.accept(tx, kind="k", data={"s": SECRET})
    db.close()
    before = run("keys", "status", "--db", db_path, "--keys-file", str(path))
    assert before.exit_code == 0, before.output
    assert "one" in before.output and "current" in before.output
    assert run("keys", "generate", "--id", "two", "--file", str(path)).exit_code == 0
    rotated = run("keys", "rotate", "--db", db_path, "--batch", "1", "--keys-file", str(path))
    assert rotated.exit_code == 0, rotated.output
    after = run("keys", "status", "--db", db_path, env={"PIGEON_KEYS_FILE": str(path)})
    assert after.exit_code == 0, after.output
    assert " one " not in after.output and "two" in after.output
    no_keys = run("keys", "rotate", "--db", db_path)
    assert no_keys.exit_code == 2 and "no keys" in no_keys.output
    # Keys missing from the keyring: shown, and a rotation says it could not read them.
    stranger = run("keys", "generate", "--id", "three").stdout.strip()
    lost = run("keys", "rotate", "--db", db_path, env={"PIGEON_KEYS": stranger})
    assert lost.exit_code == 1 and "under two" in lost.output, lost.output
    shown = run("keys", "status", "--db", db_path, env={"PIGEON_KEYS": stranger})
    assert "NOT IN KEYRING" in shown.output


def test_jobs_and_queue_commands_show_sealed_values_with_the_keys_of_the_environment(
    tmp_path: Path,
) -> None:
    path = _keys_file(tmp_path)
    keys = Keyring.from_file(path)
    db_path = str(tmp_path / "s.db")
    db = open_server_db(db_path, keyring=keys)
    manager = JobManager(db)
    manager.enqueue(JobSpec("q", "t", {"s": SECRET}, max_attempts=1))
    (job,) = manager.lease_jobs("q", "w", 1, 30)
    manager.finish([AttemptOutcome(job, RuntimeError(SECRET))])
    db.close()
    env = {"PIGEON_KEYS_FILE": str(path)}
    failed = run("jobs", "failed", "--db", db_path, env=env)
    assert failed.exit_code == 0 and SECRET in failed.output, failed.output
    unkeyed = run("jobs", "failed", "--db", db_path)
    assert unkeyed.exit_code != 0 and "'one'" in unkeyed.output
    queue_path = str(tmp_path / "q.db")
    with OfflineQueue(queue_path, keys=keys) as queue:
        op = queue.enqueue("create", "note:1", {"s": SECRET})
    shown = run("queue", "show", op.id, "--file", queue_path, env=env)
    assert shown.exit_code == 0 and SECRET in shown.output, shown.output
    refused = run("queue", "show", op.id, "--file", queue_path)
    assert refused.exit_code == 1 and "'one'" in refused.output


@pytest.mark.parametrize("bad", ["nope", "k:AAAA"])
def test_unusable_keys_in_the_environment_are_refused_by_name(tmp_path: Path, bad: str) -> None:
    db = tmp_path / "s.db"
    open_server_db(db).close()
    result = run("jobs", "list", "--db", str(db), env={"PIGEON_KEYS": bad})
    assert result.exit_code == 2 and "PIGEON_KEYS" in result.output, result.output


def test_a_staged_key_opens_first_and_seals_once_it_is_used(tmp_path: Path) -> None:
    """Many processes: every one gets the new key before any seals with it, so none meets
    a value it cannot open while the change rolls out."""
    path = _keys_file(tmp_path)
    staged = run("keys", "generate", "--id", "two", "--staged", "--file", str(path))
    assert staged.exit_code == 0 and "staged" in staged.output
    assert Keyring.from_file(path).ids == ("one", "two")
    used = run("keys", "use", "two", "--file", str(path))
    assert used.exit_code == 0, used.output
    assert Keyring.from_file(path).ids == ("two", "one")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    unknown = run("keys", "use", "three", "--file", str(path))
    assert unknown.exit_code == 2 and "no key 'three'" in unknown.output
